// A run's hash-chain verdict, verified once per checkpoint: the verified prefix (up to which
// seq, ending in which hash) is kept in checkpoint_chain_verdicts, and a read verifies only the
// rows written since. A page of a long run therefore costs what a page of a short one does.
import { DELTA_FORMAT, verifyChain, type ChainRow } from '../core/checkpoint-hash.ts';
import { chainAnchors } from './retention.ts';
import type { WorkspaceTx } from './workspace.ts';

export type ChainVerdict =
  | { state: 'none' }
  | { state: 'verifies'; verifiedSeq: number }
  | { state: 'broken'; brokenSeq: number; problem: string };

const STORED_VERDICT_SQL = `
select v.verified_seq, v.verified_hash, v.broken_seq, v.problem
  from checkpoint_chain_verdicts v
 where v.workspace_id = $1 and v.agent_run_id = $2`;

const CHAIN_ROWS_AFTER_SQL = `
select c.workspace_id, c.agent_run_id, c.checkpoint_seq, c.step, c.tool_history, c.files_touched, c.branch,
       c.worktree_path, c.commit_oid, c.prev_hash, c.hash, c.payload_format, c.tree_oid, c.manifest_digest,
       c.manifest_count, c.legacy_window
  from worker_checkpoints c
 where c.workspace_id = $1 and c.agent_run_id = $2 and c.checkpoint_seq > $3
 order by c.checkpoint_seq`;

const SAVE_VERDICT_SQL = `
insert into checkpoint_chain_verdicts as v
       (workspace_id, agent_run_id, verified_seq, verified_hash, broken_seq, problem)
values ($1, $2, $3, $4, $5, $6)
on conflict (workspace_id, agent_run_id) do update
   set verified_seq = excluded.verified_seq, verified_hash = excluded.verified_hash,
       broken_seq = excluded.broken_seq, problem = excluded.problem, updated_at = now()
 where v.verified_seq < excluded.verified_seq or (v.broken_seq is null and excluded.broken_seq is not null)`;

interface Stored {
  verifiedSeq: number;
  verifiedHash: string | null;
  brokenSeq: number | null;
  problem: string | null;
}

async function storedVerdict(tx: WorkspaceTx, agentRunId: string): Promise<Stored | undefined> {
  const [row] = await tx.unsafe(STORED_VERDICT_SQL, [tx.workspaceId, agentRunId]);
  if (!row) return undefined;
  const { verified_seq: verifiedSeq, verified_hash: verifiedHash, broken_seq: brokenSeq, problem } = row;
  return { verifiedSeq, verifiedHash, brokenSeq, problem };
}

async function chainRowsAfter(tx: WorkspaceTx, agentRunId: string, seq: number): Promise<ChainRow[]> {
  return (await tx.unsafe(CHAIN_ROWS_AFTER_SQL, [tx.workspaceId, agentRunId, seq])) as unknown as ChainRow[];
}

async function saveVerdict(tx: WorkspaceTx, agentRunId: string, s: Stored): Promise<void> {
  const params = [tx.workspaceId, agentRunId, s.verifiedSeq, s.verifiedHash, s.brokenSeq, s.problem];
  await tx.unsafe(SAVE_VERDICT_SQL, params);
}

/**
 * The verdict of the run's chain, verifying only checkpoints not verified before. A row in the
 * migrated format 2 needs the rows before it to rebuild its payload: such a chain is verified
 * from its start (those rows are old and few; new rows are self-contained).
 */
export async function chainVerdict(tx: WorkspaceTx, agentRunId: string): Promise<ChainVerdict> {
  const stored = await storedVerdict(tx, agentRunId);
  if (stored?.brokenSeq != null) return { state: 'broken', brokenSeq: stored.brokenSeq, problem: stored.problem ?? '' };
  let from = stored?.verifiedSeq ?? 0;
  let rows = await chainRowsAfter(tx, agentRunId, from);
  // A prune since the last read removed rows past the verified prefix: verify from the anchor.
  const pruned = from > 0 && rows.length > 0 && rows[0]!.checkpoint_seq !== from + 1;
  const folded = rows.some((r) => (r.payload_format ?? 1) !== DELTA_FORMAT && (r.payload_format ?? 1) !== 1);
  if (from > 0 && (pruned || folded)) {
    from = 0;
    rows = await chainRowsAfter(tx, agentRunId, 0);
  }
  if (!rows.length) return from > 0 ? { state: 'verifies', verifiedSeq: from } : { state: 'none' };
  const anchor = from > 0 ? (stored?.verifiedHash ?? null) : await chainAnchors(tx, agentRunId);
  const result = verifyChain(rows, anchor);
  // A chain that starts after seq 1 with no anchor fails as a whole, though each row verifies.
  const firstBad = result.ok
    ? -1
    : Math.max(
        0,
        result.verified.findIndex((ok) => !ok),
      );
  if (firstBad === -1) {
    const last = rows.at(-1)!;
    const verified = { verifiedSeq: last.checkpoint_seq, verifiedHash: last.hash, brokenSeq: null, problem: null };
    await saveVerdict(tx, agentRunId, verified);
    return { state: 'verifies', verifiedSeq: last.checkpoint_seq };
  }
  const good = rows[firstBad - 1];
  const brokenSeq = rows[firstBad]!.checkpoint_seq;
  const problem = result.problems[0] ?? `seq ${brokenSeq} does not verify`;
  await saveVerdict(tx, agentRunId, {
    verifiedSeq: good?.checkpoint_seq ?? from,
    verifiedHash: good?.hash ?? stored?.verifiedHash ?? null,
    brokenSeq,
    problem,
  });
  return { state: 'broken', brokenSeq, problem };
}

export interface ChainPageRow extends ChainRow {
  attempt: number;
  occurred_at: Date;
}

export interface ChainPage {
  /** Newest first. */
  rows: ChainPageRow[];
  /** Per row: the stored verdict covers it and it verifies on this read (its hash, its link to the row before). */
  verified: boolean[];
  problems: string[];
  /** The seq to pass back for the next (older) page; null when this page reaches the first row. */
  older: number | null;
}

const CHAIN_PAGE_SQL = `
select c.workspace_id, c.agent_run_id, c.checkpoint_seq, c.step, c.attempt, c.tool_history, c.files_touched, c.branch,
       c.worktree_path, c.commit_oid, c.prev_hash, c.hash, c.payload_format, c.tree_oid, c.manifest_digest,
       c.manifest_count, c.legacy_window, c.occurred_at
  from worker_checkpoints c
 where c.workspace_id = $1 and c.agent_run_id = $2 and ($3::int is null or c.checkpoint_seq < $3)
 order by c.checkpoint_seq desc
 limit $4`;

/**
 * One page of the run's rows older than `before`, newest first, checked against `verdict`. The
 * page's own rows are hashed again (an edit to a shown row shows at once) and linked to the row
 * just older than the page; nothing else of the chain is read. Rows in the migrated format 2
 * need the rows before them to rebuild their payload: on such a page the stored verdict stands.
 */
export async function chainPage(
  tx: WorkspaceTx,
  agentRunId: string,
  verdict: ChainVerdict,
  before: number | null,
  limit: number,
): Promise<ChainPage> {
  const fetched = (await tx.unsafe(CHAIN_PAGE_SQL, [
    tx.workspaceId,
    agentRunId,
    before,
    limit + 1,
  ])) as unknown as ChainPageRow[];
  const rows = fetched.slice(0, limit);
  const covered = (seq: number) =>
    verdict.state === 'verifies' ? seq <= verdict.verifiedSeq : verdict.state === 'broken' && seq < verdict.brokenSeq;
  const ascending = [...fetched].reverse();
  const selfContained = ascending.every((r) => (r.payload_format ?? 1) !== 2);
  // The page's oldest row links to what it names (the rows before the page are not read); a row after
  // a retention gap inside the page links to the run's anchor.
  const oldest = ascending[0];
  const anchors = oldest && [
    { seq: oldest.checkpoint_seq - 1, hash: oldest.prev_hash },
    ...(await chainAnchors(tx, agentRunId)),
  ];
  const check = selfContained && oldest ? verifyChain(ascending, anchors) : undefined;
  const okBySeq = new Map(ascending.map((r, i) => [r.checkpoint_seq, check ? check.verified[i]! : true]));
  return {
    rows,
    verified: rows.map((r) => covered(r.checkpoint_seq) && okBySeq.get(r.checkpoint_seq) === true),
    problems: check?.problems ?? [],
    older: fetched.length > limit ? (rows.at(-1)?.checkpoint_seq ?? null) : null,
  };
}
