// Recovery from a Postgres outage: two workers (as `npm run worker` starts them, supervised) and
// the stall detector, a run in flight on each; the bench's own embedded Postgres stopped for three
// leases and started again on its port. Measured: from the moment Postgres answers again to the
// moment every run whose lease lapsed is running again (re-dispatched and claimed by a worker).
// Reported beside WORKER_LEASE_MS; the target is at most twice the lease.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, realpath, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import postgres from 'postgres';
import { parseConfig, PROJECT_ROOT } from '../core/config.ts';
import { openDatabase } from '../store/connection.ts';
import { ensureEmbeddedPostgres, stopEmbeddedPostgres } from '../store/embedded.ts';
import { createWorkspace } from '../store/runs.ts';
import { withWorkspace } from '../store/workspace.ts';
import { dispatchJob } from '../operator/dispatch.ts';
import { runGit } from '../worker/git/run-git.ts';
import { createQueue } from '../worker/queue/index.ts';
import { round, summarize, type Summary } from './stats.ts';

const TSX_LOADER = import.meta.resolve('tsx');

export interface OutageFigure {
  leaseMs: number;
  heartbeatMs: number;
  stallCheckMs: number;
  outageMs: number;
  workers: number;
  samples: number;
  /** Postgres answering again → every lapsed run running again, ms. */
  recovery: Summary;
  /** recovery's median over WORKER_LEASE_MS (target ≤ 2). */
  recoveryOverLease: number;
  recoveryOverLeaseMax: number;
}

async function makeRepo(dir: string): Promise<string> {
  await runGit(dir, ['init', '-q', '-b', 'main']);
  await runGit(dir, ['config', 'user.name', 'Echodo Bench']);
  await runGit(dir, ['config', 'user.email', 'bench@echodo.invalid']);
  await writeFile(path.join(dir, 'README.md'), '# outage bench\n');
  await runGit(dir, ['add', '-A']);
  await runGit(dir, ['commit', '-q', '-m', 'initial']);
  return dir;
}

function transcript(rounds: number, delayMs: number) {
  const steps = Array.from({ length: rounds }, (_, i) => ({
    toolCalls: [{ toolName: 'write_file', input: { path: `src/f${i}.ts`, content: `export const n${i} = ${i};\n` } }],
    delayMs,
  }));
  return { steps: [...steps, { text: 'Done.' }] };
}

export async function measureOutageRecovery(
  log: (line: string) => void,
  options: { samples: number; leaseMs?: number; workers?: number } = { samples: 3 },
): Promise<OutageFigure> {
  const leaseMs = options.leaseMs ?? 3000;
  const heartbeatMs = Math.round(leaseMs / 10);
  const workers = options.workers ?? 2;
  const outageMs = 3 * leaseMs;
  const home = await realpath(await mkdtemp(path.join(os.tmpdir(), 'echodo-bench-outage-')));
  const server = await ensureEmbeddedPostgres(home);
  const repo = await makeRepo(await realpath(await mkdtemp(path.join(home, 'repo-'))));
  const transcriptPath = path.join(home, 'transcript.json');
  // Long enough that the run is still in flight after the outage.
  await writeFile(transcriptPath, JSON.stringify(transcript(60, 200)));
  const env: Record<string, string> = {
    DATABASE_URL: server.url,
    ECHODO_HOME: path.join(home, 'echodo'),
    WORKER_WORKTREE_BASE: path.join(home, 'worktrees'),
    WORKER_REPO_ROOT: repo,
    WORKER_REPLAY_DIR: home,
    WORKER_LEASE_MS: String(leaseMs),
    WORKER_HEARTBEAT_MS: String(heartbeatMs),
    WORKER_BLPOP_TIMEOUT_S: '1',
    WORKER_MAX_TOOL_STEPS: '100',
    LOG_LEVEL: 'warn',
    ECHODO_SUPERVISE: '1',
  };
  const config = parseConfig(env);
  const db = await openDatabase(config);
  const queue = createQueue({ config, db, workerId: 'bench-outage' });
  const su = postgres(server.url, { max: 1, onnotice: () => {} });
  const procs: ChildProcess[] = [];
  const start = (script: string, extra: Record<string, string> = {}) => {
    const child = spawn(process.execPath, ['--import', TSX_LOADER, path.join(PROJECT_ROOT, 'scripts', script)], {
      cwd: PROJECT_ROOT,
      env: { ...process.env, ...env, ...extra },
      stdio: 'ignore',
    });
    procs.push(child);
  };
  const samples: number[] = [];
  try {
    await withWorkspace(db.app, 'bench', (tx) => createWorkspace(tx));
    for (let i = 0; i < workers; i++) start('worker.ts', { WORKER_ID: `bench-outage-${i}` });
    start('stall-detector.ts');
    for (let sample = 0; sample < options.samples; sample++) {
      const ids: string[] = [];
      for (let i = 0; i < workers; i++) {
        const job = {
          workspaceId: 'bench',
          convoyId: 'outage',
          briefId: `outage-${sample}-${i}`,
          roleId: 'coder',
          harnessAlias: 'code',
          repoPath: repo,
          baseRef: 'main',
          brief: 'Write files.',
          model: `replay:${transcriptPath}`,
        };
        ids.push((await dispatchJob(db, queue, job)).agentRunId);
      }
      await until(
        async () => {
          const rows = await su`select r.id from agent_runs r where r.id = any(${ids}) and r.status = 'running'
                              and (select count(*) from worker_checkpoints c where c.agent_run_id = r.id) >= 2`;
          return rows.length === ids.length;
        },
        60_000,
        'runs in flight on every worker',
      );
      const attempts = await su`select id, attempt from agent_runs where id = any(${ids})`;
      const before = new Map(attempts.map((r) => [r.id as string, r.attempt as number]));
      await stopEmbeddedPostgres(home);
      await sleep(outageMs);
      await ensureEmbeddedPostgres(home);
      const answered = performance.now();
      await until(
        async () => {
          const rows = await su`select id, status, attempt from agent_runs where id = any(${ids})`;
          return rows.every((r) => r.status === 'running' && (r.attempt as number) > before.get(r.id as string)!);
        },
        120_000,
        'every lapsed run running again',
        20,
      );
      const ms = performance.now() - answered;
      samples.push(ms);
      const which = `${sample + 1}/${options.samples}`;
      log(`outage ${which}: lapsed runs running again ${ms.toFixed(0)} ms after Postgres answered (lease ${leaseMs})`);
      await until(
        async () => {
          const rows = await su`select status from agent_runs where id = any(${ids})`;
          return rows.every((r) => r.status !== 'running' && r.status !== 'queued');
        },
        180_000,
        'the runs to finish',
      );
    }
  } finally {
    for (const p of procs) if (p.exitCode === null) p.kill('SIGTERM');
    const exits = procs.map((p) => (p.exitCode === null ? new Promise((r) => p.once('exit', r)) : null));
    await Promise.race([Promise.all(exits), sleep(15_000)]);
    for (const p of procs) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
    await su.end({ timeout: 2 });
    await queue.close();
    await db.close();
    await stopEmbeddedPostgres(home).catch(() => {});
    await rm(home, { recursive: true, force: true });
  }
  const recovery = summarize(samples);
  return {
    leaseMs,
    heartbeatMs,
    stallCheckMs: config.STALL_CHECK_MS,
    outageMs,
    workers,
    samples: samples.length,
    recovery,
    recoveryOverLease: round(recovery.median / leaseMs),
    recoveryOverLeaseMax: round(Math.max(...samples) / leaseMs),
  };
}

async function until(check: () => Promise<boolean>, timeoutMs: number, what: string, intervalMs = 100): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      if (await check()) return;
    } catch {
      // Postgres still coming back: ask again
    }
    if (Date.now() > deadline) throw new Error(`outage bench: timed out waiting for ${what}`);
    await sleep(intervalMs);
  }
}
