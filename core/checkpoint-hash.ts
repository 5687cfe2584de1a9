// The hash chain: hash = sha256(prev_hash || canonical JSON of the row's payload).
// Any edit of a stored row, or a row removed from the middle, breaks every hash after it.
//
// Three payload formats (worker_checkpoints.payload_format), all verified here:
//  1 stored:   the pre-008 cumulative row, hashed as stored (files_touched = every path so far,
//              tool_history = the bounded window);
//  2 migrated: a format-1 row rewritten by migration 008 into its delta; its hash is still the
//              format-1 hash, checked against the cumulative payload rebuilt by folding the deltas
//              (files) and the last `legacy_window` history entries;
//  3 delta:    this checkpoint's files and tool calls only, plus a fixed-size summary (the
//              commit's tree and the run's manifest digest) that makes verification complete.
import { createHash } from 'node:crypto';

export interface FileTouched {
  path: string;
  sha256: string | null; // null when deleted
  bytes?: number;
  deleted?: boolean;
}

export const DELTA_FORMAT = 3;

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
  /** Format 3 only (absent keys keep format 1 hashing exactly as before). */
  format?: number;
  treeOid?: string | null;
  manifestDigest?: string;
  manifestCount?: number;
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

// ------------------------------------------------------------------ the manifest digest
// Every path the run ever touched with its current sha256 (null: deleted). The digest is the
// sum mod 2^256 of sha256(path \0 sha256|"deleted") over the entries: order-free, and adding,
// replacing or deleting one path updates it in O(1).
const MOD = 1n << 256n;

function entryTerm(path: string, sha256: string | null): bigint {
  return BigInt(
    `0x${createHash('sha256')
      .update(`${path}\0${sha256 ?? 'deleted'}`)
      .digest('hex')}`,
  );
}

export class ManifestDigest {
  private sum = 0n;
  count = 0;
  add(path: string, sha256: string | null): void {
    this.sum = (this.sum + entryTerm(path, sha256)) % MOD;
    this.count++;
  }
  remove(path: string, sha256: string | null): void {
    this.sum = (this.sum - entryTerm(path, sha256) + MOD) % MOD;
    this.count--;
  }
  clone(): ManifestDigest {
    const d = new ManifestDigest();
    d.sum = this.sum;
    d.count = this.count;
    return d;
  }
  hex(): string {
    return this.sum.toString(16).padStart(64, '0');
  }
  static of(entries: Iterable<{ path: string; sha256: string | null }>): ManifestDigest {
    const d = new ManifestDigest();
    for (const e of entries) d.add(e.path, e.sha256);
    return d;
  }
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
  /** 1 when absent: a row written before migration 008 (or by a fixture in the old shape). */
  payload_format?: number | null;
  tree_oid?: string | null;
  manifest_digest?: string | null;
  manifest_count?: number | null;
  legacy_window?: number | null;
}

export function payloadOfRow(row: ChainRow): CheckpointPayload {
  const base: CheckpointPayload = {
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
  if ((row.payload_format ?? 1) !== DELTA_FORMAT) return base;
  return {
    ...base,
    format: DELTA_FORMAT,
    treeOid: row.tree_oid ?? null,
    manifestDigest: row.manifest_digest ?? '',
    manifestCount: row.manifest_count ?? 0,
  };
}

const byPath = (a: FileTouched, b: FileTouched) => (a.path < b.path ? -1 : 1);

export interface ChainVerdict {
  ok: boolean;
  /** Per row, in the order given: does its hash verify and link to the row before it? */
  verified: boolean[];
  problems: string[];
  /**
   * The manifest digest the latest row vouches for: stored in a format-3 row, computed from the
   * rebuilt cumulative list of a format-1/2 row. Null without rows.
   */
  manifestDigest: string | null;
}

/**
 * A hash a row links to other than the row before it: the row at `seq + 1` links to `hash`. Every
 * chain has one at seq 0, its origin (null, or a fork's source checkpoint); a retention prune leaves
 * one where the kept rows go on after the rows it removed.
 */
export interface ChainAnchor {
  seq: number;
  hash: string | null;
}

export const GENESIS: readonly ChainAnchor[] = [{ seq: 0, hash: null }];

/**
 * Verifies rows of one run in seq order. `anchors` are what rows may link to across a start or a
 * gap (chainAnchors in store/retention.ts); a bare hash is what the first row links to, whatever
 * its seq: the row before a tail the caller read. Null is GENESIS.
 */
export function verifyChain(rows: ChainRow[], anchors: readonly ChainAnchor[] | string | null = GENESIS): ChainVerdict {
  const verified: boolean[] = [];
  const problems: string[] = [];
  const links: readonly ChainAnchor[] =
    typeof anchors === 'string' ? [{ seq: (rows[0]?.checkpoint_seq ?? 1) - 1, hash: anchors }] : (anchors ?? GENESIS);
  let before: ChainRow | undefined;
  // The fold that rebuilds format-1 payloads of migrated rows (and the legacy manifest).
  let files = new Map<string, FileTouched>();
  let window: unknown[] = [];
  let legacyTail = false;
  for (const row of rows) {
    const format = row.payload_format ?? 1;
    let payload: CheckpointPayload;
    if (format === 1) {
      files = new Map(row.files_touched.map((f) => [f.path, f]));
      window = row.tool_history;
      payload = payloadOfRow(row);
    } else if (format === 2) {
      for (const f of row.files_touched) files.set(f.path, f);
      const n = row.legacy_window ?? 0;
      window = n > 0 ? [...window, ...row.tool_history].slice(-n) : [];
      payload = { ...payloadOfRow(row), toolHistory: window, filesTouched: [...files.values()].sort(byPath) };
    } else {
      for (const f of row.files_touched) files.set(f.path, f);
      payload = payloadOfRow(row);
    }
    legacyTail = format !== DELTA_FORMAT;
    const seq = row.checkpoint_seq;
    // The row before it, or an anchor for this seq that no row before it passed.
    const anchor = links.find((a) => a.seq === seq - 1 && (!before || before.checkpoint_seq <= a.seq));
    const linked = before && before.checkpoint_seq === seq - 1 ? { hash: before.hash } : anchor;
    const ok = !!linked && row.prev_hash === linked.hash && checkpointHash(row.prev_hash, payload) === row.hash;
    if (!ok) {
      if (!linked && !before) problems.push(`chain starts at seq ${seq}, not 1, and has no anchor`);
      else if (!linked) problems.push(`seq ${seq}: expected seq ${before!.checkpoint_seq + 1} (gap or duplicate)`);
      else if (row.prev_hash !== linked.hash) problems.push(`seq ${seq}: prev_hash does not link to the row before`);
      else problems.push(`seq ${seq}: hash does not match the row's contents`);
    }
    verified.push(ok && verified.every(Boolean));
    before = row;
  }
  const last = rows.at(-1);
  const manifestDigest = !last
    ? null
    : legacyTail
      ? ManifestDigest.of([...files.values()].map((f) => ({ path: f.path, sha256: f.deleted ? null : f.sha256 }))).hex()
      : (last.manifest_digest ?? null);
  return { ok: problems.length === 0 && verified.every(Boolean), verified, problems, manifestDigest };
}
