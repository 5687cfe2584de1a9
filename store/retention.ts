// Retention: which checkpoint rows of a finished run a prune keeps, what goes with the others, and
// the prune itself. The rule is stated once, in `ranked`: each run's last `keep.last` rows, and its
// first (seq 1) when `keep.first`. `npm run prune` keeps the last row (LAST_ROW); a workspace's
// policy keeps the first and the last K (policyKeep). The last row pruned becomes the anchor the
// first row after it links to, so the chain stays verifiable (chainAnchors, verifyChain).
import type { PendingQuery, Row } from 'postgres';
import { GENESIS, type ChainAnchor } from '../core/checkpoint-hash.ts';
import type { CheckpointRow } from './checkpoints.ts';
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

/** Which rows of a run a prune keeps: the last `last`, and the first too when `first`. */
export interface KeepRule {
  first: boolean;
  last: number;
}

/** What `npm run prune` keeps: each run's last row. */
export const LAST_ROW: KeepRule = { first: false, last: 1 };

/** What a workspace's policy keeps: the first row (a fork or rewind to the start stays possible) and the last K. */
export const policyKeep = (keepLast: number): KeepRule => ({ first: true, last: keepLast });

/** The runs a prune looks at: these, or those finished more than `finishedDaysAgo` days ago. */
export type RunSet = string[] | { finishedDaysAgo: number };

/**
 * The finished runs of the set. Only a finished run is pruned: no lease holder writes its rows or
 * refs any more (a retry makes it queued again, and a prune then leaves it alone).
 */
function finishedRuns(tx: WorkspaceTx, runs: RunSet): PendingQuery<Row[]> {
  const which = Array.isArray(runs)
    ? tx`r.id = any(${runs}::text[])`
    : tx`r.finished_at < now() - make_interval(days => ${runs.finishedDaysAgo})`;
  return tx`
    select r.id from agent_runs r
     where r.workspace_id = ${tx.workspaceId} and r.status in ('completed', 'failed', 'cancelled') and ${which}`;
}

/** The runs' checkpoint rows (seq, hash, commit), each with `kept`: the one definition of what retention keeps. */
function ranked(tx: WorkspaceTx, runs: RunSet, keep: KeepRule): PendingQuery<Row[]> {
  return tx`
    with ranked as (
      select c.agent_run_id, c.checkpoint_seq, c.hash, c.commit_oid,
             (${keep.first}::boolean and c.checkpoint_seq = 1)
             or row_number() over (partition by c.agent_run_id order by c.checkpoint_seq desc) <= ${keep.last}::int
             as kept
        from worker_checkpoints c
       where c.workspace_id = ${tx.workspaceId} and c.agent_run_id in (${finishedRuns(tx, runs)}))`;
}

/** One run's prune: how many rows go, their commits (none a kept row names) and the kept rows' commits. */
export interface PrunedRows {
  agentRunId: string;
  rows: number;
  /** Their git notes go before the rows do. */
  commits: string[];
  /** Their notes stay, unless the run's branch goes too. */
  keptCommits: string[];
}

/**
 * What a prune of these runs removes, run by run. Runs named by id are each listed (with nothing to
 * prune, a prune may still remove their worktree or branch); of a finished set, those with rows to prune.
 */
export async function prunedRows(tx: WorkspaceTx, runs: RunSet, keep: KeepRule): Promise<PrunedRows[]> {
  const onlyPrunable = Array.isArray(runs) ? tx`` : tx`having bool_or(not kept)`;
  const rows = await tx<{ agent_run_id: string; rows: number; commits: string[]; kept_commits: string[] }[]>`
    ${ranked(tx, runs, keep)}
    select agent_run_id, rows, kept_commits, array(select unnest(pruned) except select unnest(kept_commits)) as commits
      from (select agent_run_id, count(*) filter (where not kept)::int as rows,
                   coalesce(array_agg(distinct commit_oid) filter (where not kept and commit_oid is not null), '{}')
                     as pruned,
                   coalesce(array_agg(distinct commit_oid) filter (where kept and commit_oid is not null), '{}')
                     as kept_commits
              from ranked group by agent_run_id ${onlyPrunable}) p`;
  return rows.map((r) => ({
    agentRunId: r.agent_run_id,
    rows: r.rows,
    commits: r.commits,
    keptCommits: r.kept_commits,
  }));
}

/** The rows a prune of these runs keeps, whole, by run and seq: the notes left on the checkpoint remote. */
export async function keptCheckpoints(tx: WorkspaceTx, runIds: string[], keep: KeepRule): Promise<CheckpointRow[]> {
  return tx<CheckpointRow[]>`
    ${ranked(tx, runIds, keep)}
    select c.* from worker_checkpoints c
      join ranked k on k.agent_run_id = c.agent_run_id and k.checkpoint_seq = c.checkpoint_seq
     where c.workspace_id = ${tx.workspaceId} and k.kept
     order by c.agent_run_id, c.checkpoint_seq`;
}

/**
 * Deletes the rows of these runs that `keep` does not keep, recording each run's last row deleted
 * as its anchor (a fork's origin stays in origin_hash). Returns the rows deleted.
 */
export async function pruneRuns(tx: WorkspaceTx, runIds: string[], keep: KeepRule): Promise<number> {
  if (!runIds.length) return 0;
  const [row] = await tx<{ deleted: number }[]>`
    ${ranked(tx, runIds, keep)},
    cut as (
      select distinct on (agent_run_id) agent_run_id, checkpoint_seq, hash from ranked
       where not kept order by agent_run_id, checkpoint_seq desc),
    anchored as (
      insert into checkpoint_anchors (workspace_id, agent_run_id, anchor_seq, anchor_hash)
      select ${tx.workspaceId}, agent_run_id, checkpoint_seq, hash from cut
      on conflict (workspace_id, agent_run_id) do update
         set anchor_seq = excluded.anchor_seq, anchor_hash = excluded.anchor_hash, pruned_at = now()),
    deleted as (
      delete from worker_checkpoints c using ranked p
       where c.workspace_id = ${tx.workspaceId} and c.agent_run_id = p.agent_run_id
         and c.checkpoint_seq = p.checkpoint_seq and not p.kept
      returning 1)
    select count(*)::int as deleted from deleted`;
  return row!.deleted;
}

export interface RetentionPreview {
  runs: number;
  rows: number;
  bytes: number;
}

/** What a policy prune would remove now (a dry run): runs, checkpoint rows and their stored bytes. */
export async function retentionPreview(tx: WorkspaceTx, keepLast: number, keepDays: number): Promise<RetentionPreview> {
  const [row] = await tx<{ runs: number; rows: number; bytes: string }[]>`
    ${ranked(tx, { finishedDaysAgo: keepDays }, policyKeep(keepLast))}
    select count(distinct c.agent_run_id)::int as runs, count(c.*)::int as rows,
           coalesce(sum(pg_column_size(c.*)), 0)::bigint as bytes
      from worker_checkpoints c
      join ranked k on k.agent_run_id = c.agent_run_id and k.checkpoint_seq = c.checkpoint_seq
     where c.workspace_id = ${tx.workspaceId} and not k.kept`;
  return { runs: row!.runs, rows: row!.rows, bytes: Number(row!.bytes) };
}
