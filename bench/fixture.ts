// A claimed run with its worktree and a real CheckpointWriter, built the way worker/run/execute.ts
// builds one: a Lease (not started: no heartbeat timer), and a TouchTracker told about the
// touched paths with note() instead of watching with chokidar.
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { claimRun, recordRun, setRunWorkspace, type RunRow } from '../store/runs.ts';
import { withWorkspace } from '../store/workspace.ts';
import { stateFromRow } from '../worker/checkpoints/state.ts';
import { checkpointWriterFor, type CheckpointWriter, type RunIdentity } from '../worker/checkpoints/writer.ts';
import { recordToolCall } from '../worker/checkpoints/history.ts';
import { TouchTracker } from '../worker/checkpoints/tracker.ts';
import { parseJob, type Job } from '../core/job.ts';
import { Lease } from '../worker/run/lease.ts';
import { createLogger } from '../worker/log.ts';
import { prepareWorktree } from '../worker/worktrees/worktree.ts';
import type { BenchEnv } from './env.ts';
import { fileContent } from './repos.ts';
import { acquireTree, type TreeLease } from '../worker/tree/registry.ts';

export const silentLog = createLogger({ level: 'silent' });
/** Long enough that the unstarted lease never goes stale between samples. */
export const BENCH_LEASE_MS = 3_600_000;

export interface RunFixture {
  run: RunRow;
  identity: RunIdentity;
  lease: Lease;
  tracker: TouchTracker;
  writer: CheckpointWriter;
  /** The run's tree process, held for the fixture's life as a run attempt holds it. */
  tree: TreeLease;
  worktree: string;
  branch: string;
  repo: string;
  /** Rounds played so far (drives file contents so every round is a real change). */
  round: number;
  /** Makes one tool round: rewrites `paths`, tells the tracker, records history like the session. */
  playRound(paths: string[]): Promise<void>;
}

export function benchJob(env: BenchEnv, repo: string, overrides: Partial<Record<string, unknown>> = {}): Job {
  const parsed = parseJob({
    workspaceId: env.workspaceId,
    convoyId: 'bench-convoy',
    briefId: `bench-${Math.random().toString(36).slice(2, 10)}`,
    roleId: 'coder',
    harnessAlias: 'code',
    repoPath: repo,
    baseRef: 'main',
    brief: 'benchmark run',
    model: 'replay:/dev/null',
    ...overrides,
  });
  if (!parsed.ok) throw new Error(`bench job is invalid: ${parsed.problems.join('; ')}`);
  return parsed.job;
}

export async function createRunFixture(
  env: BenchEnv,
  repo: string,
  options: { historyRounds?: number; model?: string } = {},
): Promise<RunFixture> {
  const job = benchJob(env, repo, { model: options.model ?? 'replay:/dev/null' });
  const scoped = <T>(fn: Parameters<typeof withWorkspace<T>>[2]) => withWorkspace<T>(env.db.app, env.workspaceId, fn);
  const { agentRunId } = await scoped((tx) => recordRun(tx, job));
  const run = await scoped((tx) =>
    claimRun(tx, { agentRunId, workerId: `bench-${process.pid}`, leaseMs: BENCH_LEASE_MS }),
  );
  if (!run) throw new Error(`bench run ${agentRunId} could not be claimed`);
  const wt = await prepareWorktree({
    repoPath: repo,
    worktreeBase: env.config.WORKER_WORKTREE_BASE,
    workspaceId: run.workspace_id,
    agentRunId: run.id,
    briefId: run.brief_id,
    baseRef: 'main',
    log: silentLog,
  });
  await scoped((tx) =>
    setRunWorkspace(tx, {
      agentRunId: run.id,
      leaseEpoch: run.lease_epoch,
      harnessAlias: 'code',
      branch: wt.branch,
      worktreePath: wt.path,
      baseOid: wt.baseOid,
    }),
  );
  const lease = new Lease(env.db.app, run.workspace_id, run.id, run.lease_epoch, {
    heartbeatMs: 1000,
    leaseMs: BENCH_LEASE_MS,
    log: silentLog,
  });
  // As a run attempt does: its tree process is started once and kept, never restarted between rounds.
  const tree = await acquireTree(wt.path);
  const tracker = new TouchTracker(wt.path);
  const state = stateFromRow(undefined, wt.baseOid);
  // A run in its steady state: the bounded history is already full, as it is after 50 rounds.
  for (let r = 1; r <= (options.historyRounds ?? env.config.WORKER_CHECKPOINT_HISTORY_LIMIT); r++)
    state.history.push(historyRecord(r, [`src/earlier-${r}.ts`]));
  state.step = state.history.length;
  const identity: RunIdentity = {
    workspaceId: run.workspace_id,
    agentRunId: run.id,
    convoyId: run.convoy_id,
    briefId: run.brief_id,
    attempt: run.attempt,
  };
  const writer = checkpointWriterFor(
    env.config,
    {
      sql: env.db.app,
      run: identity,
      lease,
      tree: { root: wt.path, git: { branch: wt.branch, worktreePath: wt.path } },
      tracker,
      leaseMs: BENCH_LEASE_MS,
      log: silentLog,
    },
    state,
  );
  const fixture: RunFixture = {
    run: { ...run, branch: wt.branch, worktree_path: wt.path, base_oid: wt.baseOid },
    identity,
    lease,
    tracker,
    writer,
    tree,
    worktree: wt.path,
    branch: wt.branch,
    repo,
    round: 0,
    async playRound(paths) {
      await writer.readyForTools(); // as the session's tools do: the last checkpoint's index work first
      fixture.round++;
      await Promise.all(
        paths.map((p) => writeFile(path.join(wt.path, p), `${fileContent(fixture.round, fixture.round)}// ${p}\n`)),
      );
      for (const p of paths) tracker.note(p);
      state.step++;
      state.history.push(historyRecord(state.step, paths));
    },
  };
  return fixture;
}

/** What the session records for a round: one write_file, or one command for a many-file round. */
function historyRecord(round: number, paths: string[]) {
  if (paths.length === 1) {
    const content = fileContent(round);
    return recordToolCall({
      round,
      tool: 'write_file',
      input: { path: paths[0], content },
      output: { path: paths[0], bytes: content.length, sha256: 'f'.repeat(64) },
    });
  }
  return recordToolCall({
    round,
    tool: 'run_command',
    input: { command: 'npm run lint -- --fix' },
    output: { exitCode: 0, timedOut: false, stdout: `fixed ${paths.length} files\n`.repeat(20), stderr: '' },
  });
}
