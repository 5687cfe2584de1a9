// The storage sweep the stall detector runs every WORKER_RETENTION_SWEEP_MS: for each workspace
// with a storage policy, shorten finished runs past the retention age to their last K
// checkpoints (Postgres rows; the chain keeps an anchor), then measure what the workspace holds
// and record it, so dispatch can refuse new runs of a workspace over its quota.
import type { Database } from '../store/connection.ts';
import { pruneRunToLast, runsPastRetention } from '../store/retention.ts';
import { recordUsage, storagePolicy, workspacePostgresBytes } from '../store/storage.ts';
import { withWorkspace, type WorkspaceTx } from '../store/workspace.ts';
import type { Logger } from '../worker/log.ts';

export interface StorageSweepResult {
  workspaces: { workspaceId: string; rowsPruned: number; usedBytes: number; quotaBytes: number | null }[];
}

/** One workspace's policy, in its transaction: the sweep's step, and the panel's "Prune now". */
export async function applyStoragePolicy(tx: WorkspaceTx): Promise<StorageSweepResult['workspaces'][number]> {
  const policy = await storagePolicy(tx);
  let rowsPruned = 0;
  if (policy.keepLast !== null) {
    for (const runId of await runsPastRetention(tx, policy.keepLast, policy.keepDays ?? 0)) {
      rowsPruned += await pruneRunToLast(tx, runId, policy.keepLast);
    }
  }
  const used = (await workspacePostgresBytes(tx)).total;
  await recordUsage(tx, used);
  return { workspaceId: tx.workspaceId, rowsPruned, usedBytes: used, quotaBytes: policy.quotaBytes };
}

export async function sweepStoragePolicies(db: Database, log: Logger): Promise<StorageSweepResult> {
  const workspaces = await db.admin<{ workspace_id: string }[]>`
    select workspace_id from echodo_storage_policy_workspaces()`;
  const result: StorageSweepResult = { workspaces: [] };
  for (const { workspace_id: workspaceId } of workspaces) {
    const outcome = await withWorkspace(db.app, workspaceId, applyStoragePolicy);
    if (outcome.rowsPruned) log.info(outcome, 'storage sweep: pruned checkpoints past the retention policy');
    if (outcome.quotaBytes !== null && outcome.usedBytes > outcome.quotaBytes) {
      log.warn(outcome, 'storage sweep: workspace over its quota; new runs are refused');
    }
    result.workspaces.push(outcome);
  }
  return result;
}
