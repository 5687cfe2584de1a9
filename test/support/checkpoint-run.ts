// A run driven through the real CheckpointWriter, in-process: a claimed run in a real
// Postgres, a real git worktree, the writer's own commit/row/note/pack path. Tool rounds are
// played by writing files and telling the tracker, as the session's tools do. Much faster than
// a worker process per run, so long runs (hundreds of checkpoints) fit in `npm test`.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Sql } from 'postgres';
import type { Config } from '../../core/config.ts';
import type { Database } from '../../store/connection.ts';
import { claimRun, recordRun, setRunWorkspace, type RunRow } from '../../store/runs.ts';
import { withWorkspace } from '../../store/workspace.ts';
import { stateFromChain, type CheckpointState } from '../../worker/checkpoints/state.ts';
import { checkpointWriterFor, type CheckpointWriter, type RunIdentity } from '../../worker/checkpoints/writer.ts';
import { recordToolCall } from '../../worker/checkpoints/history.ts';
import { TouchTracker } from '../../worker/checkpoints/tracker.ts';
import { notedCommits } from '../../worker/checkpoints/notes.ts';
import { RemotePusher, runNotesRef } from '../../worker/remote/push.ts';
import { checkRunIntegrity } from '../../operator/integrity.ts';
import { checkpointChain, runManifest } from '../../store/checkpoints.ts';
import { parseJob } from '../../core/job.ts';
import { Lease } from '../../worker/run/lease.ts';
import { createLogger } from '../../worker/log.ts';
import { prepareWorktree } from '../../worker/worktrees/worktree.ts';
import { git } from './git.ts';

export const silentLog = createLogger({ level: 'silent' });
const LEASE_MS = 3_600_000;

export const sha256 = (text: string | Buffer) => createHash('sha256').update(text).digest('hex');

export interface DrivenRun {
  run: RunRow;
  identity: RunIdentity;
  lease: Lease;
  tracker: TouchTracker;
  writer: CheckpointWriter;
  worktree: string;
  branch: string;
  /** Rewrites/creates `write`, deletes `remove`, records the round's tool calls; then a checkpoint. */
  round(write: Record<string, string>, remove?: string[]): Promise<void>;
}

export interface DriveOptions {
  db: Database;
  /** The connection the writer uses (the app role's, or a superuser's before RLS matters). */
  sql?: Sql;
  config: Config;
  workspaceId: string;
  repo: string;
  packEvery?: number;
  /** The run's id (default: a new one); run ids are unique per workspace only. */
  agentRunId?: string;
  /** WORKER_CHECKPOINT_REMOTE: a URL; `aroundPush` wraps each checkpoint's push (to hold or time it). */
  remote?: { url: string; aroundPush?: (push: () => Promise<void>) => Promise<void> };
}

function remoteFor(o: DriveOptions, identity: RunIdentity, lease: Lease, wt: { path: string; branch: string }) {
  if (!o.remote) return undefined;
  const notesRef = runNotesRef(identity.workspaceId, identity.agentRunId);
  const pusher = new RemotePusher({
    cwd: wt.path,
    remote: o.remote.url,
    branch: wt.branch,
    notesRef,
    assertHeld: () => lease.assertHeld(),
    log: silentLog,
  });
  const around = o.remote.aroundPush;
  if (around) {
    const push = pusher.pushCheckpoint.bind(pusher);
    pusher.pushCheckpoint = (oid) => around(() => push(oid));
  }
  return { pusher, notesRef };
}

function writerFor(
  o: DriveOptions,
  identity: RunIdentity,
  lease: Lease,
  tracker: TouchTracker,
  wt: { path: string; branch: string },
  state: CheckpointState,
) {
  return checkpointWriterFor(
    o.config,
    {
      sql: o.sql ?? o.db.app,
      run: identity,
      lease,
      tree: { root: wt.path, git: { branch: wt.branch, worktreePath: wt.path } },
      tracker,
      leaseMs: LEASE_MS,
      log: silentLog,
      packEvery: o.packEvery,
      remote: remoteFor(o, identity, lease, wt),
    },
    state,
  );
}

function driven(
  o: DriveOptions,
  run: RunRow,
  lease: Lease,
  wt: { path: string; branch: string },
  state: CheckpointState,
): DrivenRun {
  const identity: RunIdentity = {
    workspaceId: run.workspace_id,
    agentRunId: run.id,
    convoyId: run.convoy_id,
    briefId: run.brief_id,
    attempt: run.attempt,
  };
  const tracker = new TouchTracker(wt.path);
  const writer = writerFor(o, identity, lease, tracker, wt, state);
  return {
    run,
    identity,
    lease,
    tracker,
    writer,
    worktree: wt.path,
    branch: wt.branch,
    async round(write, remove = []) {
      await writer.readyForTools(); // as the session's tools do: the last checkpoint's index work first
      await Promise.all(
        Object.entries(write).map(async ([p, content]) => {
          await mkdir(path.dirname(path.join(wt.path, p)), { recursive: true });
          await writeFile(path.join(wt.path, p), content);
        }),
      );
      await Promise.all(remove.map((p) => rm(path.join(wt.path, p), { force: true })));
      const round = state.step + 1;
      for (const [p, content] of Object.entries(write)) {
        tracker.note(p);
        state.history.push(
          recordToolCall({
            round,
            tool: 'write_file',
            input: { path: p, content },
            output: { path: p, bytes: content.length, sha256: sha256(content) },
          }),
        );
      }
      for (const p of remove) {
        tracker.note(p);
        state.history.push(
          recordToolCall({
            round,
            tool: 'run_command',
            input: { command: `rm ${p}` },
            output: { exitCode: 0, timedOut: false, stdout: '', stderr: '' },
          }),
        );
      }
      state.step = round;
      await writer.write();
    },
  };
}

/** A new run, claimed, with its worktree: round() plays a tool round and checkpoints it. */
export async function startDrivenRun(o: DriveOptions): Promise<DrivenRun> {
  const parsed = parseJob({
    workspaceId: o.workspaceId,
    convoyId: 'convoy-long',
    briefId: `long-${Math.random().toString(36).slice(2, 8)}`,
    roleId: 'coder',
    harnessAlias: 'code',
    repoPath: o.repo,
    baseRef: 'main',
    brief: 'a long run',
    model: 'replay:/dev/null',
    ...(o.agentRunId ? { agentRunId: o.agentRunId } : {}),
  });
  if (!parsed.ok) throw new Error(parsed.problems.join('; '));
  const sql = o.sql ?? o.db.app;
  const scoped = <T>(fn: Parameters<typeof withWorkspace<T>>[2]) => withWorkspace<T>(sql, o.workspaceId, fn);
  const { agentRunId } = await scoped((tx) => recordRun(tx, parsed.job));
  const run = await scoped((tx) => claimRun(tx, { agentRunId, workerId: `test-${process.pid}`, leaseMs: LEASE_MS }));
  if (!run) throw new Error('run not claimed');
  const wt = await prepareWorktree({
    repoPath: o.repo,
    worktreeBase: o.config.WORKER_WORKTREE_BASE,
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
  const lease = new Lease(sql, run.workspace_id, run.id, run.lease_epoch, {
    heartbeatMs: 1000,
    leaseMs: LEASE_MS,
    log: silentLog,
  });
  const state = stateFromChain([], wt.baseOid, o.config.WORKER_CHECKPOINT_HISTORY_LIMIT, []);
  return driven(o, { ...run, branch: wt.branch, worktree_path: wt.path, base_oid: wt.baseOid }, lease, wt, state);
}

/** Continues a run from its rows, as run-job does after verification (same lease epoch: a test shortcut). */
export async function continueDrivenRun(o: DriveOptions, prior: DrivenRun): Promise<DrivenRun> {
  const sql = o.sql ?? o.db.app;
  const { chain, manifest } = await withWorkspace(sql, o.workspaceId, async (tx) => ({
    chain: await checkpointChain(tx, prior.run.id),
    manifest: await runManifest(tx, prior.run.id),
  }));
  const state = stateFromChain(chain, prior.run.base_oid, o.config.WORKER_CHECKPOINT_HISTORY_LIMIT, manifest);
  return driven(o, prior.run, prior.lease, { path: prior.worktree, branch: prior.branch }, state);
}

/** path → sha256 of every blob in a commit's tree (one ls-tree, one cat-file --batch). */
export async function treeManifest(repo: string, rev: string): Promise<Map<string, string>> {
  const entries = (await git(repo, 'ls-tree', '-r', '-z', rev))
    .split('\0')
    .filter(Boolean)
    .map((line) => {
      const [meta, p] = line.split('\t');
      return { path: p!, oid: meta!.split(' ')[2]! };
    });
  const { execFileSync } = await import('node:child_process');
  const out = execFileSync('git', ['-C', repo, 'cat-file', '--batch'], {
    input: entries.map((e) => e.oid).join('\n') + '\n',
    maxBuffer: 1 << 28,
  });
  const result = new Map<string, string>();
  let at = 0;
  for (const e of entries) {
    const nl = out.indexOf(10, at);
    const size = Number(out.subarray(at, nl).toString().split(' ')[2]);
    result.set(e.path, sha256(out.subarray(nl + 1, nl + 1 + size)));
    at = nl + 1 + size + 1;
  }
  return result;
}

/** Loose objects in the repository (git count-objects). */
export async function looseObjects(repo: string): Promise<number> {
  const out = await git(repo, 'count-objects', '-v');
  return Number(/^count: (\d+)/m.exec(out)![1]);
}

/**
 * Every checkpoint's commit on the branch with its note, every object there (fsck), the worktree
 * clean against its index and tip, and integrity-check intact.
 */
export async function assertCheckpointsIntact(db: Database, config: Config, repo: string, r: DrivenRun): Promise<void> {
  const chain = await withWorkspace(db.app, r.identity.workspaceId, (tx) => checkpointChain(tx, r.run.id));
  const onBranch = new Set((await git(repo, 'rev-list', `refs/heads/${r.branch}`)).split('\n'));
  const noted = await notedCommits(repo, config.WORKER_NOTES_REF);
  for (const row of chain) {
    assert.ok(onBranch.has(row.commit_oid!), `checkpoint ${row.checkpoint_seq}'s commit is on the branch`);
    assert.ok(noted.has(row.commit_oid!), `checkpoint ${row.checkpoint_seq}'s note is there`);
  }
  await git(repo, 'fsck', '--connectivity-only', '--no-progress'); // throws on a missing object
  assert.equal(await git(r.worktree, 'status', '--porcelain'), '', 'the worktree matches its index and the tip');
  const report = await checkRunIntegrity(db, config, r.identity.workspaceId, r.run.id);
  assert.deepEqual(report!.findings, [], 'integrity intact');
}
