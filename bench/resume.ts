// Benchmark 3: resume versus starting over.
// Resume: a run checkpointed after ROUNDS tool rounds, then "crashed" (requeued as the stall
// detector does: attempt + 1, resumeFromCheckpoint). The real worker code (worker/run/execute.ts
// executeDelivery, in this process) takes it; the clock starts when the claim has committed
// (the delivery's ack, which run-job calls right after claimRun) and stops when the first
// resumed tool call touches the worktree (inotify sees write_file's temp file appear).
// Everything between is the product's resume: chain load, verification (worktree, git status,
// notes, file hashes), worktree reuse, watcher start, model setup, the fenced tool call.
// Starting over: `git clone --no-local file://repo` (objects really copied, files checked out;
// the repo has HISTORY_COMMITS commits of history, bench/repos.ts) plus redoing the ROUNDS rounds' writes. Model time for redone rounds is left out, which
// flatters starting over.
import { watch } from 'node:fs';
import { Writable } from 'node:stream';
import pino from 'pino';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { checkpointChain } from '../store/checkpoints.ts';
import { withWorkspace } from '../store/workspace.ts';
import { TouchTracker } from '../worker/checkpoints/tracker.ts';
import { inspectRun } from '../worker/checkpoints/verify.ts';
import { parseConfig } from '../core/config.ts';
import { runGit } from '../worker/git/run-git.ts';
import type { Job } from '../core/job.ts';
import type { Logger } from '../worker/log.ts';
import type { Delivery, JobQueue } from '../worker/queue/types.ts';
import { executeDelivery } from '../worker/run/execute.ts';
import type { BenchEnv } from './env.ts';
import { createRunFixture, silentLog } from './fixture.ts';
import { fileContent, spreadPaths } from './repos.ts';
import { Samples } from './stats.ts';

export const RESUME_ROUNDS = 10;
const FIRST_CALL_FILE = 'bench-first-resumed-call.txt';

/** The queue is not consulted by a run that completes; a stub keeps the bench off Redis. */
const noQueue: JobQueue = {
  backend: 'postgres',
  enqueue: async () => {},
  take: async () => null,
  deadLetter: async () => {},
  close: async () => {},
};

export interface ResumeResult {
  files: number;
  rounds: number;
  /** How the timed resumes ended (executeDelivery's result), e.g. { completed: 30, lease_lost: 1 }. */
  outcomes: Record<string, number>;
  /** The worker's log lines of one traced resume, in ms after the claim. */
  timeline: { msAfterClaim: number; msg: string }[];
}

/** A traced resume's log lines as ms after its claim, with the first tool call (`firstCall`) placed among them. */
export function resumeTimeline(
  lines: { at: number; msg: string }[],
  traced: { claimedAt: number; ms: number | null },
  firstCall: string,
): { msAfterClaim: number; msg: string }[] {
  const timeline = lines
    .filter((l) => l.at >= traced.claimedAt - 1)
    .map((l) => ({ msAfterClaim: Math.round((l.at - traced.claimedAt) * 10) / 10, msg: l.msg }));
  if (traced.ms !== null) timeline.push({ msAfterClaim: Math.round(traced.ms * 10) / 10, msg: firstCall });
  return timeline.sort((a, b) => a.msAfterClaim - b.msAfterClaim);
}

/** A logger that stamps each line the worker logs with performance.now(), to see where resume's time goes. */
export function stampingLogger(): { log: Logger; lines: { at: number; msg: string }[] } {
  const lines: { at: number; msg: string }[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      const at = performance.now();
      for (const line of chunk.toString('utf8').split('\n').filter(Boolean)) {
        try {
          const entry = JSON.parse(line) as { msg?: string; error?: string };
          // A failure's reason goes with it into the timeline: a failed resume says why.
          lines.push({
            at,
            msg: entry.error ? `${entry.msg} (${String(entry.error).slice(0, 300)})` : String(entry.msg),
          });
        } catch {
          lines.push({ at, msg: line.slice(0, 80) });
        }
      }
      done();
    },
  });
  return { log: pino({ level: 'debug' }, sink), lines };
}

/**
 * `flat`: the same files with one commit of history; cloned too in each sample (under
 * `${key}.cloneNoHistory`), to show what the history costs a clone.
 */
export async function measureResume(
  env: BenchEnv,
  repo: string,
  files: number,
  samples: number,
  s: Samples,
  key: string,
  flat?: string,
): Promise<ResumeResult> {
  const dir = path.join(env.workDir, 'resume', String(files));
  await mkdir(dir, { recursive: true });
  const transcriptPath = path.join(dir, 'transcript.json');
  const roundPaths = spreadPaths(files, RESUME_ROUNDS);
  // Entries 0..ROUNDS-1 are the rounds done before the crash; entry ROUNDS is the first resumed call.
  const steps = [
    ...roundPaths.map((p, r) => ({
      toolCalls: [{ toolName: 'write_file', input: { path: p, content: fileContent(r, 1) } }],
    })),
    { toolCalls: [{ toolName: 'write_file', input: { path: FIRST_CALL_FILE, content: 'resumed\n' } }] },
    { text: 'done' },
  ];
  await writeFile(transcriptPath, JSON.stringify({ steps }));

  // The run before the crash: ROUNDS real rounds, each checkpointed by the real writer.
  const f = await createRunFixture(env, repo, { historyRounds: 0, model: `replay:${transcriptPath}` });
  for (const p of roundPaths) {
    await f.playRound([p]);
    await f.writer.write();
  }
  await f.writer.settleNotes(); // the last note and index work, before the crash is staged
  const target = f.writer.state.headOid!;
  const config = parseConfig({
    ...env.childEnv,
    WORKER_REPO_ROOT: repo,
    WORKER_MAX_TOOL_STEPS: '1000',
    LOG_LEVEL: 'silent',
  });

  /** Back to the state a crash after round ROUNDS leaves, requeued as the stall detector does. */
  const crash = async () => {
    await env.su`delete from worker_checkpoints where agent_run_id = ${f.run.id} and checkpoint_seq > ${RESUME_ROUNDS}`;
    // The run's manifest as of checkpoint ROUNDS: the resumed rounds only add FIRST_CALL_FILE, a
    // new path, so dropping the entries written after it restores it exactly.
    await env.su`delete from checkpoint_manifest where agent_run_id = ${f.run.id} and seq > ${RESUME_ROUNDS}`;
    await env.su`update agent_runs set status = 'queued', lease_epoch = lease_epoch + 1, worker_id = null, lease_expires_at = null,
                   attempt = 2, step = ${RESUME_ROUNDS}, finished_at = null, available_at = now(),
                   job = job || '{"resumeFromCheckpoint": true}'::jsonb
                 where id = ${f.run.id}`;
    await runGit(repo, ['update-ref', `refs/heads/${f.branch}`, target]);
    await runGit(f.worktree, ['reset', '--hard', '-q', target]);
    await runGit(f.worktree, ['clean', '-fdq']);
  };

  /** One resume of the crashed run by the real run code (worker/run/execute.ts); ms from claim to first tool call. */
  const resumeOnce = async (
    log: Logger = silentLog,
  ): Promise<{ ms: number | null; result: string; claimedAt: number }> => {
    const [{ job }] = (await env.su<{ job: Job }[]>`select job from agent_runs where id = ${f.run.id}`) as unknown as [
      { job: Job },
    ];
    let claimedAt = 0;
    let firstCallAt = 0;
    const watcher = watch(f.worktree, (_event, name) => {
      if (!firstCallAt && name && String(name).includes(FIRST_CALL_FILE)) firstCallAt = performance.now();
    });
    const delivery: Delivery = {
      raw: JSON.stringify(job),
      ack: async () => {
        claimedAt = performance.now();
      },
    };
    // A resume that starves the event loop for seconds can have its Postgres session ended by the
    // server (idle_in_transaction_session_timeout), and postgres.js then throws from a timer
    // (seen at 50k files under load). In a worker that kills the process; here it is an outcome.
    let uncaught: unknown;
    const onUncaught = (err: unknown) => {
      uncaught ??= err;
    };
    process.on('uncaughtException', onUncaught);
    let timer: NodeJS.Timeout | undefined;
    try {
      let result = await Promise.race([
        executeDelivery(
          {
            config,
            db: env.db,
            queue: noQueue,
            workerId: `bench-resume-${process.pid}`,
            log,
            shutdown: new AbortController().signal,
          },
          delivery,
        ).catch((err) => `threw: ${(err as Error).message.slice(0, 120)}`),
        new Promise<string>((resolve) => (timer = setTimeout(() => resolve('hung (no result in 120 s)'), 120_000))),
      ]);
      if (uncaught)
        result = `process would have crashed: ${(uncaught as Error).message?.slice(0, 120) ?? String(uncaught)}`;
      if (!claimedAt) throw new Error(`resume sample saw no claim (result ${result})`);
      // No first call: the resume failed (e.g. lease_lost); counted in the outcomes, not timed.
      return { ms: firstCallAt && !uncaught ? firstCallAt - claimedAt : null, result, claimedAt };
    } finally {
      clearTimeout(timer);
      process.off('uncaughtException', onUncaught);
      watcher.close();
    }
  };

  /** Verification alone (inspectRun, read-only) on the crashed state, to show its share. */
  const verifyOnly = async () => {
    const [run] = await env.su`select * from agent_runs where id = ${f.run.id}`;
    const chain = await withWorkspace(env.db.app, env.workspaceId, (tx) => checkpointChain(tx, f.run.id));
    await s.time(`${key}.verifyOnly`, () =>
      inspectRun({ run: run as never, chain, anchor: null, repoRoot: repo, notesRef: config.WORKER_NOTES_REF }),
    );
  };

  // Each clone goes to a fresh folder, removed only when the bench ends: deleting 50k files
  // right before the next clone makes ext4 (mounted with discard) charge the deletion to it.
  let clones = 0;
  const startOver = async () => {
    const cloneDir = path.join(dir, `clone-${clones++}`);
    await s.time(`${key}.cloneAndRedo`, async () => {
      await s.time(`${key}.clone`, () =>
        runGit(dir, ['clone', '-q', '--no-local', pathToFileURL(repo).href, cloneDir]),
      );
      for (const [r, p] of roundPaths.entries()) await writeFile(path.join(cloneDir, p), fileContent(r, 1));
    });
    if (flat)
      await s.time(`${key}.cloneNoHistory`, () =>
        runGit(dir, ['clone', '-q', '--no-local', pathToFileURL(flat).href, path.join(dir, `clone-${clones++}`)]),
      );
  };

  const outcomes: Record<string, number> = {};
  for (let i = 0; i < 2; i++) {
    await crash();
    await resumeOnce(); // warm-up
    await startOver();
  }
  // What-if, for the profile: the same resume with the TouchTracker's chokidar watcher not
  // started (its initial scan of the worktree is what the timeline shows between "run resumed"
  // and the first tool call). Patched in this process only; production code is unchanged.
  const start = TouchTracker.prototype.start;
  const resumeWithoutWatcher = async () => {
    TouchTracker.prototype.start = function noWatcher() {};
    try {
      return await resumeOnce();
    } finally {
      TouchTracker.prototype.start = start;
    }
  };

  // Until `samples` resumes reached their first tool call (a few extra tries for failed ones).
  // Each sample interleaves the product's resume, the what-if and the clone, so all three see
  // the same machine.
  for (let tries = 0, ok = 0; ok < samples && tries < samples + 10; tries++) {
    await crash();
    await verifyOnly();
    const { ms, result } = await resumeOnce();
    outcomes[result] = (outcomes[result] ?? 0) + 1;
    if (ms === null) continue;
    ok++;
    s.add(`${key}.resume`, ms);
    await crash();
    const what = await resumeWithoutWatcher();
    if (what.ms === null) throw new Error(`resume without the watcher failed: ${what.result}`);
    s.add(`${key}.resumeNoWatcher`, what.ms);
    await startOver();
  }

  // One more resume with the worker's own log lines time-stamped: where the time goes.
  await crash();
  const trace = stampingLogger();
  const traced = await resumeOnce(trace.log);
  const timeline = resumeTimeline(trace.lines, traced, '(first resumed tool call touches the worktree)');

  return { files, rounds: RESUME_ROUNDS, outcomes, timeline };
}
