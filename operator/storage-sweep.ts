// The storage sweep the stall detector runs every WORKER_RETENTION_SWEEP_MS: for each workspace
// with a storage policy, shorten finished runs past the retention age to their last K
// checkpoints, then measure what the workspace holds (Postgres and git) and record it, so that no
// run of a workspace over its quota starts (worker/run/quota.ts). Order, as `npm run prune` does
// it (operator/prune.ts), and why: the pruned checkpoints' refs on the checkpoint remote first,
// then their notes under WORKER_NOTES_REF (one rewrite per repository), only then the rows. A step
// that fails leaves its runs' rows in place: they stay past retention and the next sweep retries.
// Notes dropped before the rows would have been a bigger loss the other way round: a note whose
// row is gone is never dropped by anything.
import { existsSync } from 'node:fs';
import { redactString } from '../core/redact.ts';
import { checkpointChain } from '../store/checkpoints.ts';
import type { Database } from '../store/connection.ts';
import { commitsPrunedToLast, keptToLast, pruneRunToLast, runsPastRetention } from '../store/retention.ts';
import { getRun } from '../store/runs.ts';
import { recordUsage, runBranches, storagePolicy, workspacePostgresBytes } from '../store/storage.ts';
import { withWorkspace } from '../store/workspace.ts';
import { dropCheckpointNotes } from '../worker/checkpoints/notes.ts';
import { workspaceGitBytes } from '../worker/git/git-bytes.ts';
import type { Logger } from '../worker/log.ts';
import { runNotesRef } from '../worker/remote/push.ts';
import { pruneRemoteRefs, remoteRefs } from '../worker/remote/retention.ts';
import { setLocalRef } from './prune.ts';

export interface StorageSweepDeps {
  db: Database;
  log: Logger;
  /** WORKER_REPO_ROOT: the repository of runs whose job named none. */
  repoRoot: string;
  /** WORKER_NOTES_REF: the pruned checkpoints' notes leave it. */
  notesRef: string;
  /** WORKER_CHECKPOINT_REMOTE: the pruned runs' notes refs there keep only the kept checkpoints' notes. */
  remote?: string;
}

export interface WorkspaceSweep {
  workspaceId: string;
  rowsPruned: number;
  notesRemoved: number;
  /** Postgres and git together: what the quota is compared with. */
  usedBytes: number;
  gitBytes: number;
  quotaBytes: number | null;
  /** Runs left past retention because their notes or remote refs could not be pruned (next sweep). */
  pending: { agentRunId: string; reason: string }[];
}

export interface StorageSweepResult {
  workspaces: WorkspaceSweep[];
}

interface RunPlan {
  agentRunId: string;
  repoPath: string;
  branch: string | null;
  /** Commits of the rows that go (none a kept row names): their notes go first. */
  commits: string[];
}

/** One workspace's policy applied and its bytes measured: the sweep's step, and the panel's "Prune now". */
export async function applyStoragePolicy(deps: StorageSweepDeps, workspaceId: string): Promise<WorkspaceSweep> {
  const { db } = deps;
  const { policy, plans } = await withWorkspace(db.app, workspaceId, async (tx) => {
    const policy = await storagePolicy(tx);
    const plans: RunPlan[] = [];
    if (policy.keepLast !== null) {
      for (const agentRunId of await runsPastRetention(tx, policy.keepLast, policy.keepDays ?? 0)) {
        const run = await getRun(tx, agentRunId);
        if (!run) continue;
        plans.push({
          agentRunId,
          repoPath: run.job.repoPath ?? deps.repoRoot,
          branch: run.branch,
          commits: await commitsPrunedToLast(tx, agentRunId, policy.keepLast),
        });
      }
    }
    return { policy, plans };
  });
  const outcome: WorkspaceSweep = {
    workspaceId,
    rowsPruned: 0,
    notesRemoved: 0,
    usedBytes: 0,
    gitBytes: 0,
    quotaBytes: policy.quotaBytes,
    pending: [],
  };
  const pending = (plan: RunPlan, reason: string) => outcome.pending.push({ agentRunId: plan.agentRunId, reason });
  let ready = plans;
  if (deps.remote && policy.keepLast !== null)
    ready = await pruneRemote(deps, workspaceId, policy.keepLast, ready, pending);
  ready = await dropNotes(deps, ready, outcome, pending);
  if (ready.length && policy.keepLast !== null) {
    const keepLast = policy.keepLast;
    outcome.rowsPruned = await withWorkspace(db.app, workspaceId, async (tx) => {
      let rows = 0;
      for (const plan of ready) rows += await pruneRunToLast(tx, plan.agentRunId, keepLast);
      return rows;
    });
  }
  // Measured after the prune, outside any transaction for the git part (git may take a while).
  const { postgres, branches } = await withWorkspace(db.app, workspaceId, async (tx) => ({
    postgres: await workspacePostgresBytes(tx),
    branches: await runBranches(tx, deps.repoRoot),
  }));
  const git = await workspaceGitBytes(branches, deps.notesRef);
  outcome.gitBytes = git.total;
  outcome.usedBytes = postgres.total + git.total;
  await withWorkspace(db.app, workspaceId, (tx) => recordUsage(tx, outcome.usedBytes, outcome.gitBytes));
  return outcome;
}

/** The pruned checkpoints' notes leave the notes ref, one rewrite per repository; returns the runs ready to prune. */
async function dropNotes(
  deps: StorageSweepDeps,
  plans: RunPlan[],
  outcome: WorkspaceSweep,
  pending: (plan: RunPlan, reason: string) => void,
): Promise<RunPlan[]> {
  const byRepo = new Map<string, RunPlan[]>();
  for (const plan of plans) byRepo.set(plan.repoPath, [...(byRepo.get(plan.repoPath) ?? []), plan]);
  const ready: RunPlan[] = [];
  for (const [repoPath, repoPlans] of byRepo) {
    const commits = repoPlans.flatMap((p) => p.commits);
    if (!commits.length || !existsSync(repoPath)) {
      ready.push(...repoPlans); // no notes to drop here (a doc-writer run, or no local repository)
      continue;
    }
    try {
      outcome.notesRemoved += await dropCheckpointNotes(repoPath, deps.notesRef, commits);
      ready.push(...repoPlans);
    } catch (err) {
      const reason = redactString(`the notes under ${deps.notesRef} could not be pruned: ${(err as Error).message}`);
      deps.log.warn({ repoPath, reason }, 'storage sweep: notes kept; their runs are left for the next sweep');
      for (const p of repoPlans) pending(p, reason);
    }
  }
  return ready;
}

/** Each pruned run's notes ref on the checkpoint remote keeps only the kept checkpoints' notes. */
async function pruneRemote(
  deps: StorageSweepDeps,
  workspaceId: string,
  keepLast: number,
  plans: RunPlan[],
  pending: (plan: RunPlan, reason: string) => void,
): Promise<RunPlan[]> {
  const withRefs = plans.filter((p) => p.branch && p.commits.length);
  if (!withRefs.length) return plans;
  const names = withRefs.map((p) => runNotesRef(workspaceId, p.agentRunId));
  let present: Map<string, string>;
  try {
    const cwd = existsSync(deps.repoRoot) ? deps.repoRoot : process.cwd();
    present = await remoteRefs(cwd, deps.remote!, names);
  } catch (err) {
    const reason = redactString((err as Error).message);
    for (const p of withRefs) pending(p, reason);
    return plans.filter((p) => !withRefs.includes(p));
  }
  const ready: RunPlan[] = plans.filter((p) => !withRefs.includes(p));
  for (const plan of withRefs) {
    const notesRef = runNotesRef(workspaceId, plan.agentRunId);
    try {
      if (present.has(notesRef)) {
        if (!existsSync(plan.repoPath)) throw new Error(`no local repository at ${plan.repoPath} to push from`);
        const chain = await withWorkspace(deps.db.app, workspaceId, (tx) => checkpointChain(tx, plan.agentRunId));
        const result = await pruneRemoteRefs({
          repoPath: plan.repoPath,
          remote: deps.remote!,
          notesRef,
          branch: plan.branch!,
          kept: keptToLast(chain, keepLast),
          rewriteNotes: true,
          deleteBranch: false,
          present,
        });
        // This host's copy of the run's notes ref follows the remote, as prune's does.
        if (result.notesCommit) await setLocalRef(plan.repoPath, notesRef, result.notesCommit);
      }
      ready.push(plan);
    } catch (err) {
      const reason = redactString((err as Error).message);
      deps.log.warn({ agentRunId: plan.agentRunId, reason }, 'storage sweep: remote refs kept; the run waits');
      pending(plan, reason);
    }
  }
  return ready;
}

export async function sweepStoragePolicies(deps: StorageSweepDeps): Promise<StorageSweepResult> {
  const workspaces = await deps.db.admin<{ workspace_id: string }[]>`
    select workspace_id from echodo_storage_policy_workspaces()`;
  const result: StorageSweepResult = { workspaces: [] };
  for (const { workspace_id: workspaceId } of workspaces) {
    const outcome = await applyStoragePolicy(deps, workspaceId);
    if (outcome.rowsPruned) deps.log.info(outcome, 'storage sweep: pruned checkpoints past the retention policy');
    if (outcome.quotaBytes !== null && outcome.usedBytes > outcome.quotaBytes) {
      deps.log.warn(outcome, 'storage sweep: workspace over its quota; no run of it starts');
    }
    result.workspaces.push(outcome);
  }
  return result;
}
