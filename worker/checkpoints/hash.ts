// The hash chain: hash = sha256(prev_hash || canonical JSON of the row's payload).
// Any edit of a stored row, or a row removed from the middle, breaks every hash after it.
import { createHash } from 'node:crypto';

export interface FileTouched {
  path: string;
  sha256: string | null; // null when deleted
  bytes: number;
  deleted: boolean;
}

export interface CheckpointPayload {
  workspaceId: string;
  agentRunId: string;
  checkpointSeq: number;
  step: number;
  toolHistory: unknown[];
  filesTouched: FileTouched[];
  branch: string | null;
  worktreePath: string | null;
  commitOid: string | null;
}

/** JSON with object keys sorted at every depth: the same value always gives the same text. */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value ?? null);
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const entries = Object.entries(value as Record<string, unknown>)
    .filter(([, v]) => v !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
}

export function checkpointHash(prevHash: string | null, payload: CheckpointPayload): string {
  return createHash('sha256')
    .update(prevHash ?? '')
    .update(canonicalJson(payload))
    .digest('hex');
}

/** The columns of a worker_checkpoints row the chain covers. */
export interface ChainRow {
  workspace_id: string;
  agent_run_id: string;
  checkpoint_seq: number;
  step: number;
  tool_history: unknown[];
  files_touched: FileTouched[];
  branch: string | null;
  worktree_path: string | null;
  commit_oid: string | null;
  prev_hash: string | null;
  hash: string;
}

export function payloadOfRow(row: ChainRow): CheckpointPayload {
  return {
    workspaceId: row.workspace_id,
    agentRunId: row.agent_run_id,
    checkpointSeq: row.checkpoint_seq,
    step: row.step,
    toolHistory: row.tool_history,
    filesTouched: row.files_touched,
    branch: row.branch,
    worktreePath: row.worktree_path,
    commitOid: row.commit_oid,
  };
}

export interface ChainVerdict {
  ok: boolean;
  /** Per row, in the order given: does its hash verify and link to the row before it? */
  verified: boolean[];
  problems: string[];
}

/**
 * Verifies rows of one run in seq order. `anchor` is the hash the first row must link to:
 * null for a chain that starts at seq 1, or the anchor kept by pruning.
 */
export function verifyChain(rows: ChainRow[], anchor: string | null = null): ChainVerdict {
  const verified: boolean[] = [];
  const problems: string[] = [];
  let expectedPrev = anchor;
  let expectedSeq = rows[0]?.checkpoint_seq ?? 1;
  if (anchor === null && rows.length && expectedSeq !== 1) problems.push(`chain starts at seq ${expectedSeq}, not 1, and has no anchor`);
  for (const row of rows) {
    const ok =
      row.checkpoint_seq === expectedSeq &&
      row.prev_hash === expectedPrev &&
      checkpointHash(row.prev_hash, payloadOfRow(row)) === row.hash;
    if (!ok) {
      if (row.checkpoint_seq !== expectedSeq) problems.push(`seq ${row.checkpoint_seq}: expected seq ${expectedSeq} (gap or duplicate)`);
      else if (row.prev_hash !== expectedPrev) problems.push(`seq ${row.checkpoint_seq}: prev_hash does not link to the row before`);
      else problems.push(`seq ${row.checkpoint_seq}: hash does not match the row's contents`);
    }
    verified.push(ok && verified.every(Boolean));
    expectedPrev = row.hash;
    expectedSeq = row.checkpoint_seq + 1;
  }
  return { ok: problems.length === 0 && verified.every(Boolean), verified, problems };
}
