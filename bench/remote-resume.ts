// Benchmark 7, second half: resume on another host versus cloning the remote.
// Host A (bench/remote.ts's repository) runs ROUNDS rounds, each checkpointed through the real
// CheckpointWriter with the remote, so every checkpoint commit and the run's notes ref are on the
// remote. Then the run is "crashed" (requeued as the stall detector does, recorded on host-a) and
// host B takes it with the real run code (worker/run/execute.ts) (executeDelivery, in this process): host B has its
// own older clone of the repository (made before the run: main, not the run's branch) and an
// empty worktree base, so it must fetch the run's branch and notes from the remote, add the
// worktree at the checkpoint commit and verify it. The clock starts at the claim (the delivery's
// ack) and stops when the first resumed tool call touches the new worktree (inotify), as in
// bench/resume.ts. Every sample gets a fresh host B clone and worktree base (made untimed), so
// every sample starts from the same state. Host B is measured three ways, interleaved:
//  - a host that has been up while host A held the run (the daemon's defaults): its warm spare
//    worktree (makeSpareWorktree, what the daemon calls at start) and its remote standby's copy of
//    the run's latest checkpoint (one RemoteStandby sweep, as every WORKER_REMOTE_STANDBY_MS), both
//    made untimed before the claim; the sweep also aimed the spare at that checkpoint (the run is
//    queued: it looks abandoned): the resume fetches nothing and checks out nothing;
//  - the same, the spare left at the clone's HEAD (the standby aims it elsewhere, or spares were
//    aimed before this run looked abandoned): the resume fetches nothing, the take checks out;
//  - the same host with a standby that is behind (or off): the spare, and the fetch at the claim;
//  - a cold host (no spare, no standby: `git worktree add` and a checkout of every file).
// Starting over from the same remote, each sample: `git clone` over git://, `git clone
// --no-local` of its path, and a partial clone (--filter=blob:none) over git://, all checked out;
// and the floor (measureFloor): the fetch and the spare's checkout alone.
import { watch, type FSWatcher } from 'node:fs';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseConfig } from '../core/config.ts';
import type { Job } from '../core/job.ts';
import { fetchRun, objectStoreBytes, runNotesRef } from '../worker/remote/push.ts';
import { runGit } from '../worker/git/run-git.ts';
import type { Logger } from '../worker/log.ts';
import type { Delivery, JobQueue } from '../worker/queue/types.ts';
import { executeDelivery } from '../worker/run/execute.ts';
import { sandboxFor, sandboxOptionsFromConfig } from '../worker/sandbox/index.ts';
import { RemoteStandby } from '../worker/remote/standby.ts';
import { makeSpareWorktree } from '../worker/worktrees/spare-keeper.ts';
import { TAKE_INDEX_CONFIG } from '../worker/worktrees/spares.ts';
import { worktreePathFor } from '../worker/worktrees/worktree.ts';
import type { BenchEnv } from './env.ts';
import { createRunFixture, silentLog } from './fixture.ts';
import { remoteWriter, type RemoteSetup } from './remote-writer.ts';
import { fileContent, spreadPaths } from './repos.ts';
import { RESUME_ROUNDS, resumeTimeline, stampingLogger } from './resume.ts';
import { Samples } from './stats.ts';

const FIRST_CALL_FILE = 'bench-first-resumed-call-on-host-b.txt';

/** The queue is not consulted by a run that completes; a stub keeps the bench off Redis. */
const noQueue: JobQueue = {
  backend: 'postgres',
  enqueue: async () => {},
  take: async () => null,
  deadLetter: async () => {},
  close: async () => {},
};

/** What host B had ready at the claim (see the top of this file). */
type HostState = 'standby' | 'unaimed' | 'fetch' | 'cold';

export interface CrossHostResult {
  rounds: number;
  outcomes: Record<string, number>;
  cloneGitBytes: number;
  partialCloneBytes: number;
  /** One traced resume of each kind. */
  timeline: { msAfterClaim: number; msg: string }[];
  timelineUnaimed: { msAfterClaim: number; msg: string }[];
  timelineFetch: { msAfterClaim: number; msg: string }[];
  timelineCold: { msAfterClaim: number; msg: string }[];
}

export async function measureCrossHostResume(
  env: BenchEnv,
  setup: RemoteSetup,
  samples: number,
  s: Samples,
  key: string,
): Promise<CrossHostResult> {
  const dir = path.join(env.workDir, 'remote', `resume-${setup.files}`);
  await mkdir(dir, { recursive: true });
  const transcriptPath = path.join(dir, 'transcript.json');
  const roundPaths = spreadPaths(setup.files, RESUME_ROUNDS);
  const steps = [
    ...roundPaths.map((p, r) => ({
      toolCalls: [{ toolName: 'write_file', input: { path: p, content: fileContent(r, 1) } }],
    })),
    { toolCalls: [{ toolName: 'write_file', input: { path: FIRST_CALL_FILE, content: 'resumed on host b\n' } }] },
    { text: 'done' },
  ];
  await writeFile(transcriptPath, JSON.stringify({ steps }));

  // Host A: ROUNDS rounds, each checkpoint pushed to the remote before its row.
  const f = await createRunFixture(env, setup.hostA, { historyRounds: 0, model: `replay:${transcriptPath}` });
  const writer = remoteWriter(env, f, setup.url);
  for (const p of roundPaths) {
    await f.playRound([p]);
    await writer.write();
  }
  await writer.settleNotes();
  const target = writer.state.headOid!;
  const branchRef = `refs/heads/${f.branch}`;
  const notesRef = runNotesRef(f.identity.workspaceId, f.run.id);
  const remoteNotes = (await runGit(setup.remoteDir, ['rev-parse', '--verify', notesRef])).stdout.trim();
  // Each host serves the job from its own WORKER_REPO_ROOT (no repoPath), as in test/many-hosts.
  await env.su`update agent_runs set job = job - 'repoPath', host_id = 'host-a' where id = ${f.run.id}`;

  let sample = 0;
  /** Back to the state a crash of host A after round ROUNDS leaves; a fresh host B. */
  const crash = async (state: HostState): Promise<{ config: ReturnType<typeof parseConfig>; worktree: string }> => {
    const i = sample++;
    await env.su`delete from worker_checkpoints where agent_run_id = ${f.run.id} and checkpoint_seq > ${RESUME_ROUNDS}`;
    await env.su`delete from checkpoint_manifest where agent_run_id = ${f.run.id} and seq > ${RESUME_ROUNDS}`;
    await env.su`update agent_runs set status = 'queued', lease_epoch = lease_epoch + 1, worker_id = null, lease_expires_at = null,
                   attempt = 2, step = ${RESUME_ROUNDS}, finished_at = null, available_at = now(), host_id = 'host-a',
                   worktree_path = ${f.worktree}, job = job || '{"resumeFromCheckpoint": true}'::jsonb
                 where id = ${f.run.id}`;
    // The remote as host A left it (host B's completed resume pushed one more checkpoint).
    await runGit(setup.remoteDir, ['update-ref', branchRef, target]);
    await runGit(setup.remoteDir, ['update-ref', notesRef, remoteNotes]);
    // Host B: its own clone, made before the run (main only), and an empty worktree base.
    const hostB = path.join(dir, `host-b-${i}`);
    await runGit(dir, ['clone', '-q', '--no-checkout', setup.pristine, hostB]);
    await runGit(hostB, ['config', 'gc.auto', '0']);
    const base = path.join(dir, `worktrees-b-${i}`);
    const config = parseConfig({
      ...env.childEnv,
      WORKER_REPO_ROOT: hostB,
      WORKER_WORKTREE_BASE: base,
      WORKER_HOST_ID: 'host-b',
      WORKER_CHECKPOINT_REMOTE: setup.url,
      WORKER_MAX_TOOL_STEPS: '1000',
      LOG_LEVEL: 'silent',
    });
    const worktree = worktreePathFor(base, f.identity.workspaceId, f.run.id);
    // Host B's worker has started (warm or cold): it probed its command sandbox at start-up, as
    // scripts/worker.ts does. The probe is cached per configuration, and each sample's host B has
    // its own worktree base, so without this every sample would pay a bwrap start-up probe.
    await sandboxFor(sandboxOptionsFromConfig(config));
    // A host that has been up has its spare worktree (at its clone's HEAD), and its standby has
    // swept since host A's last checkpoint (the lease must expire first): made untimed.
    if (state !== 'cold') await makeSpareWorktree({ repoPath: hostB, worktreeBase: base, log: silentLog });
    if (state === 'standby' || state === 'unaimed') {
      const { WORKER_CHECKPOINT_REMOTE: remote, WORKER_HOST_ID: hostId, WORKER_REMOTE_TIMEOUT_MS: timeoutMs } = config;
      // As the daemon wires it (worker/daemon.ts), for the default host state.
      const aim =
        state === 'standby'
          ? {
              aimSpare: (aim: string | null) =>
                makeSpareWorktree({ repoPath: hostB, worktreeBase: base, aim, log: silentLog }),
            }
          : {};
      const standby = new RemoteStandby({
        repoPath: hostB,
        remote: remote!,
        hostId,
        intervalMs: 1000,
        timeoutMs,
        admin: env.db.admin,
        ...aim,
        log: silentLog,
      });
      const swept = await standby.sweepOnce();
      if (!swept?.fetched) throw new Error(`host B's standby fetched nothing for the run: ${JSON.stringify(swept)}`);
    }
    await mkdir(path.dirname(worktree), { recursive: true, mode: 0o700 });
    return { config, worktree };
  };

  /** One resume on host B; ms from claim to the first tool call touching host B's worktree. */
  const resumeOnce = async (
    state: HostState,
    log: Logger = silentLog,
  ): Promise<{ ms: number | null; result: string; claimedAt: number; fetchedBytes: number | null }> => {
    const { config, worktree } = await crash(state);
    const [{ job }] = (await env.su<{ job: Job }[]>`select job from agent_runs where id = ${f.run.id}`) as unknown as [
      { job: Job },
    ];
    let claimedAt = 0;
    let firstCallAt = 0;
    let inner: FSWatcher | undefined;
    // The worktree does not exist yet: watch its parent until it appears, then the worktree itself.
    const outer = watch(path.dirname(worktree), (_e, name) => {
      if (inner || String(name) !== path.basename(worktree)) return;
      try {
        inner = watch(worktree, (_e2, n) => {
          if (!firstCallAt && n && String(n).includes(FIRST_CALL_FILE)) firstCallAt = performance.now();
        });
      } catch {
        /* appeared and vanished (a half-made admin folder repaired): the next event retries */
      }
    });
    const delivery: Delivery = { raw: JSON.stringify(job), ack: async () => void (claimedAt = performance.now()) };
    let uncaught: unknown;
    const onUncaught = (err: unknown) => void (uncaught ??= err);
    process.on('uncaughtException', onUncaught);
    let timer: NodeJS.Timeout | undefined;
    try {
      let result = await Promise.race([
        executeDelivery(
          {
            config,
            db: env.db,
            queue: noQueue,
            workerId: `bench-host-b-${process.pid}`,
            log,
            shutdown: new AbortController().signal,
          },
          delivery,
        ).catch((err) => `threw: ${(err as Error).message.slice(0, 160)}`),
        new Promise<string>((resolve) => (timer = setTimeout(() => resolve('hung (no result in 180 s)'), 180_000))),
      ]);
      if (uncaught)
        result = `process would have crashed: ${(uncaught as Error).message?.slice(0, 120) ?? String(uncaught)}`;
      if (!claimedAt) throw new Error(`cross-host resume saw no claim (result ${result})`);
      const [event] = await env.su<
        { metadata: { fetchedBytes?: number; toHost?: string; standby?: boolean; aimedSpare?: boolean } }[]
      >`
        select metadata from convoy_events where agent_run_id = ${f.run.id} and type = 'run_resumed' order by id desc limit 1`;
      const fetchedBytes = event?.metadata.toHost === 'host-b' ? (event.metadata.fetchedBytes ?? null) : null;
      const fromStandby = state === 'standby' || state === 'unaimed';
      if (firstCallAt && fromStandby !== (event?.metadata.standby === true)) {
        result = `resumed ${event?.metadata.standby ? 'from' : 'without'} the standby, expected ${state}`;
      } else if (firstCallAt && (state === 'standby') !== (event?.metadata.aimedSpare === true)) {
        result = `resumed ${event?.metadata.aimedSpare ? 'with' : 'without'} an aimed spare, expected ${state}`;
      }
      return { ms: firstCallAt && !uncaught ? firstCallAt - claimedAt : null, result, claimedAt, fetchedBytes };
    } finally {
      clearTimeout(timer);
      process.off('uncaughtException', onUncaught);
      inner?.close();
      outer.close();
    }
  };

  // Clones go to fresh folders, removed after the size (deleting 50k files right before the next
  // clone would charge the deletion to it).
  let clones = 0;
  const bytes = { cloneGit: 0, partialClone: 0 };
  const startOver = async () => {
    const n = clones++;
    const into = (kind: string) => path.join(dir, `${kind}-${n}`);
    await s.time(`${key}.cloneGit`, () => runGit(dir, ['clone', '-q', setup.url, into('clone-git')]));
    await s.time(`${key}.partialClone`, () =>
      runGit(dir, ['clone', '-q', '--filter=blob:none', setup.url, into('partial')]),
    );
    await s.time(`${key}.cloneFile`, () =>
      runGit(dir, ['clone', '-q', '--no-local', pathToFileURL(setup.remoteDir).href, into('clone-file')]),
    );
    await measureFloor(into('floor'));
    if (n === 0) {
      bytes.cloneGit = await objectStoreBytes(into('clone-git'));
      bytes.partialClone = await objectStoreBytes(into('partial'));
    }
  };

  // The floor of a resume that fetches at the claim: the two git commands it cannot do without,
  // bare, on a fresh host B with a spare worktree at its HEAD (made untimed): the worker's own
  // fetch of the run's branch and notes (fetchRun), then the spare's two-way checkout at the
  // checkpoint (the read-tree that taking a spare runs). No Postgres, no verification, no lock.
  const measureFloor = async (hostB: string) => {
    await runGit(setup.remoteDir, ['update-ref', branchRef, target]); // the remote as host A left it, as crash() does
    await runGit(setup.remoteDir, ['update-ref', notesRef, remoteNotes]);
    await runGit(dir, ['clone', '-q', '--no-checkout', setup.pristine, hostB]);
    await runGit(hostB, ['config', 'gc.auto', '0']);
    const spare = (await makeSpareWorktree({ repoPath: hostB, worktreeBase: `${hostB}-worktrees`, log: silentLog }))
      .path!;
    await s.time(`${key}.floorFetch`, () =>
      fetchRun({ repoPath: hostB, remote: setup.url, branch: f.branch, notesRef }),
    );
    await s.time(`${key}.floorCheckout`, () =>
      runGit(spare, [...TAKE_INDEX_CONFIG, 'read-tree', '-m', '-u', 'HEAD', target]),
    );
  };

  const outcomes: Record<string, number> = {};
  try {
    // One warm-up of each (a resume and the clones are seconds each: one is enough to warm caches).
    const states: HostState[] = ['standby', 'unaimed', 'fetch', 'cold'];
    for (const state of states) {
      const first = await resumeOnce(state);
      if (first.ms === null) throw new Error(`cross-host resume warm-up (${state}) failed: ${first.result}`);
    }
    await startOver();
    // Interleaved: a sample is a resume of each kind, and the clones.
    for (let tries = 0, ok = 0; ok < samples && tries < samples + 10; tries++) {
      const [standby, unaimed, fetch, cold] = [
        await resumeOnce('standby'),
        await resumeOnce('unaimed'),
        await resumeOnce('fetch'),
        await resumeOnce('cold'),
      ];
      for (const r of [standby, unaimed, fetch, cold]) outcomes[r.result] = (outcomes[r.result] ?? 0) + 1;
      if (standby.ms === null || unaimed.ms === null || fetch.ms === null || cold.ms === null) continue;
      ok++;
      s.add(`${key}.resume`, standby.ms);
      s.add(`${key}.resumeUnaimed`, unaimed.ms);
      s.add(`${key}.resumeFetch`, fetch.ms);
      s.add(`${key}.resumeCold`, cold.ms);
      if (fetch.fetchedBytes !== null) s.add(`${key}.fetchedBytes`, fetch.fetchedBytes);
      await startOver();
    }
    const traceOf = async (state: HostState) => {
      const trace = stampingLogger();
      const traced = await resumeOnce(state, trace.log);
      return resumeTimeline(trace.lines, traced, "(first resumed tool call touches host B's worktree)");
    };
    const [timeline, timelineUnaimed] = [await traceOf('standby'), await traceOf('unaimed')];
    const [timelineFetch, timelineCold] = [await traceOf('fetch'), await traceOf('cold')];
    const { cloneGit: cloneGitBytes, partialClone: partialCloneBytes } = bytes;
    return {
      rounds: RESUME_ROUNDS,
      outcomes,
      cloneGitBytes,
      partialCloneBytes,
      timeline,
      timelineUnaimed,
      timelineFetch,
      timelineCold,
    };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
