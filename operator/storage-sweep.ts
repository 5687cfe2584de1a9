// The storage sweep the stall detector runs every WORKER_RETENTION_SWEEP_MS: for each workspace
// with a storage policy, shorten finished runs past the retention age to their first and last K
// checkpoints, by the path `npm run prune` takes too (operator/prune-runs.ts: the remote's refs,
// then the notes, then the rows; a step that fails leaves its runs for the next sweep), then
// measure what the workspace holds (Postgres and git) and record it, so that no run of a
// workspace over its quota starts (worker/run/quota.ts).
import type { Database } from '../store/connection.ts';
import { policyKeep } from '../store/retention.ts';
import { recordUsage, runBranches, storagePolicy, workspacePostgresBytes } from '../store/storage.ts';
import { withWorkspace } from '../store/workspace.ts';
import { workspaceGitBytes } from '../worker/git/git-bytes.ts';
import type { Logger } from '../worker/log.ts';
import { planPrunes, prunePlannedRuns } from './prune-runs.ts';

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

/** One workspace's policy applied and its bytes measured: the sweep's step, and the panel's "Prune now". */
export async function applyStoragePolicy(deps: StorageSweepDeps, workspaceId: string): Promise<WorkspaceSweep> {
  const { db } = deps;
  const policy = await withWorkspace(db.app, workspaceId, storagePolicy);
  const outcome: WorkspaceSweep = {
    workspaceId,
    rowsPruned: 0,
    notesRemoved: 0,
    usedBytes: 0,
    gitBytes: 0,
    quotaBytes: policy.quotaBytes,
    pending: [],
  };
  if (policy.keepLast !== null) {
    const keep = policyKeep(policy.keepLast);
    const runs = { finishedDaysAgo: policy.keepDays ?? 0 };
    const plans = await withWorkspace(db.app, workspaceId, (tx) => planPrunes(tx, runs, keep, deps.repoRoot));
    const steps = { ...deps, keep, who: 'storage sweep', dryRun: false };
    const pruned = await prunePlannedRuns(
      db,
      plans.map((p) => ({ ...p, deleteBranch: false })),
      steps,
    );
    outcome.rowsPruned = pruned.rowsDeleted;
    outcome.notesRemoved = pruned.notesRemoved;
    outcome.pending = pruned.pending;
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
