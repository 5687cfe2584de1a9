// Retention: prune checkpoint rows of finished runs, keeping each run's last rows and an anchor
// (the hash the first row after the pruned ones links to) so the chain stays verifiable.
import { GENESIS, type ChainAnchor } from '../core/checkpoint-hash.ts';
import type { WorkspaceTx } from './workspace.ts';

/**
 * What the run's rows may link to besides each other (verifyChain): its origin (seq 0: null, or a
 * fork's source checkpoint) and, once pruned, the hash of the last row pruned.
 */
export async function chainAnchors(tx: WorkspaceTx, agentRunId: string): Promise<ChainAnchor[]> {
  const [row] = await tx<{ anchor_seq: number; anchor_hash: string; origin_hash: string | null }[]>`
    select anchor_seq, anchor_hash, origin_hash from checkpoint_anchors
     where workspace_id = ${tx.workspaceId} and agent_run_id = ${agentRunId}`;
  if (!row) return [...GENESIS];
  const origin = { seq: 0, hash: row.anchor_seq === 0 ? row.anchor_hash : row.origin_hash };
  return row.anchor_seq === 0 ? [origin] : [origin, { seq: row.anchor_seq, hash: row.anchor_hash }];
}

/**
 * Deletes every checkpoint of the run but the last, recording the hash of the last deleted one
 * as the anchor. Returns the number of rows deleted (0 on dry run: counts only).
 */
export async function pruneRunCheckpoints(tx: WorkspaceTx, agentRunId: string, dryRun: boolean): Promise<number> {
  const [last] = await tx<{ seq: number }[]>`
    select max(checkpoint_seq) as seq from worker_checkpoints where agent_run_id = ${agentRunId}`;
  if (!last?.seq || last.seq <= 1) return 0;
  if (dryRun) {
    const [c] = await tx<{ n: number }[]>`
      select count(*)::int as n from worker_checkpoints where agent_run_id = ${agentRunId} and checkpoint_seq < ${last.seq}`;
    return c!.n;
  }
  const [anchor] = await tx<{ seq: number; hash: string }[]>`
    select checkpoint_seq as seq, hash from worker_checkpoints where agent_run_id = ${agentRunId} and checkpoint_seq = ${last.seq - 1}`;
  if (!anchor) return 0;
  await tx`insert into checkpoint_anchors (workspace_id, agent_run_id, anchor_seq, anchor_hash)
           values (${tx.workspaceId}, ${agentRunId}, ${anchor.seq}, ${anchor.hash})
           on conflict (workspace_id, agent_run_id) do update set anchor_seq = excluded.anchor_seq, anchor_hash = excluded.anchor_hash, pruned_at = now()`;
  const deleted =
    await tx`delete from worker_checkpoints where agent_run_id = ${agentRunId} and checkpoint_seq < ${last.seq}`;
  return deleted.count;
}

/**
 * The commits of the rows a prune deletes (every row but the last), none that the last row also
 * names: their git notes go with the rows (operator/prune.ts).
 */
export async function prunableCommits(tx: WorkspaceTx, agentRunId: string): Promise<string[]> {
  const rows = await tx<{ commit_oid: string }[]>`
    with last as (select checkpoint_seq, commit_oid from worker_checkpoints
                  where agent_run_id = ${agentRunId} order by checkpoint_seq desc limit 1)
    select distinct c.commit_oid from worker_checkpoints c, last
    where c.agent_run_id = ${agentRunId} and c.checkpoint_seq < last.checkpoint_seq
      and c.commit_oid is not null and c.commit_oid is distinct from last.commit_oid`;
  return rows.map((r) => r.commit_oid);
}

/**
 * Finished runs past the workspace's retention age with more than `keepLast` checkpoints after
 * their first: the ones a policy prune shortens.
 */
export async function runsPastRetention(tx: WorkspaceTx, keepLast: number, keepDays: number): Promise<string[]> {
  const rows = await tx<{ id: string }[]>`
    select r.id from agent_runs r
     where r.workspace_id = ${tx.workspaceId} and r.status in ('completed', 'failed', 'cancelled')
       and r.finished_at < now() - make_interval(days => ${keepDays})
       and (select count(*) from worker_checkpoints c
             where c.workspace_id = r.workspace_id and c.agent_run_id = r.id and c.checkpoint_seq > 1) > ${keepLast}`;
  return rows.map((r) => r.id);
}

/**
 * Keeps the run's first checkpoint and its last `keepLast`, a contiguous tail that verifies from
 * the anchor (the hash of the last row deleted); the first still links to the chain's origin.
 * Returns the rows deleted.
 */
export async function pruneRunToLast(tx: WorkspaceTx, agentRunId: string, keepLast: number): Promise<number> {
  const [cut] = await tx<{ seq: number; hash: string }[]>`
    select checkpoint_seq as seq, hash from worker_checkpoints
     where workspace_id = ${tx.workspaceId} and agent_run_id = ${agentRunId}
     order by checkpoint_seq desc offset ${keepLast} limit 1`;
  if (!cut || cut.seq <= 1) return 0;
  await tx`insert into checkpoint_anchors (workspace_id, agent_run_id, anchor_seq, anchor_hash)
           values (${tx.workspaceId}, ${agentRunId}, ${cut.seq}, ${cut.hash})
           on conflict (workspace_id, agent_run_id) do update
              set anchor_seq = excluded.anchor_seq, anchor_hash = excluded.anchor_hash, pruned_at = now()`;
  const deleted = await tx`delete from worker_checkpoints
                            where workspace_id = ${tx.workspaceId} and agent_run_id = ${agentRunId}
                              and checkpoint_seq > 1 and checkpoint_seq <= ${cut.seq}`;
  return deleted.count;
}

/** The rows of a run's chain (in seq order) that pruneRunToLast keeps: the first and the last `keepLast`. */
export function keptToLast<T extends { checkpoint_seq: number }>(chain: T[], keepLast: number): T[] {
  return chain.filter((row, i) => row.checkpoint_seq === 1 || i >= chain.length - keepLast);
}

/**
 * The commits of the rows pruneRunToLast deletes (all but the first and the last `keepLast`), none
 * that a kept row also names: their git notes go before the rows do (operator/storage-sweep.ts).
 */
export async function commitsPrunedToLast(tx: WorkspaceTx, agentRunId: string, keepLast: number): Promise<string[]> {
  const rows = await tx<{ commit_oid: string }[]>`
    with ranked as (
      select commit_oid, checkpoint_seq = 1 or row_number() over (order by checkpoint_seq desc) <= ${keepLast} as kept
        from worker_checkpoints
       where workspace_id = ${tx.workspaceId} and agent_run_id = ${agentRunId})
    select distinct p.commit_oid from ranked p
     where not p.kept and p.commit_oid is not null
       and not exists (select 1 from ranked k where k.kept and k.commit_oid = p.commit_oid)`;
  return rows.map((r) => r.commit_oid);
}

export interface RetentionPreview {
  runs: number;
  rows: number;
  bytes: number;
}

/** What a policy prune would remove now (a dry run): runs, checkpoint rows and their stored bytes. */
export async function retentionPreview(tx: WorkspaceTx, keepLast: number, keepDays: number): Promise<RetentionPreview> {
  const [row] = await tx<{ runs: number; rows: number; bytes: string }[]>`
    select count(distinct c.agent_run_id)::int as runs, count(c.*)::int as rows,
           coalesce(sum(pg_column_size(c.*)), 0)::bigint as bytes
      from agent_runs r
     cross join lateral (
       select w.* from worker_checkpoints w
        where w.workspace_id = r.workspace_id and w.agent_run_id = r.id
        order by w.checkpoint_seq desc offset ${keepLast}) c
     where c.checkpoint_seq > 1 and r.workspace_id = ${tx.workspaceId} and r.status in ('completed', 'failed', 'cancelled')
       and r.finished_at < now() - make_interval(days => ${keepDays})`;
  return { runs: row!.runs, rows: row!.rows, bytes: Number(row!.bytes) };
}
