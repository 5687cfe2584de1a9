// What a run's next checkpoint builds on: the latest row's seq, hash and commit, the bounded
// history window the model sees, and the run's manifest. A resume rebuilds it from the last rows
// (resume-chain.ts reads them): each row holds only its own rounds, so the window is gathered
// from as many of the last rows as it takes, never from the whole run.
import type { CheckpointRow, ManifestEntry } from '../../store/checkpoints.ts';
import { boundHistory, type ToolCallRecord } from './history.ts';

/** Everything a run's next checkpoint builds on. Loaded from the latest rows on resume. */
export interface CheckpointState {
  seq: number;
  prevHash: string | null;
  /** The last checkpoint's commit (or the branch's base before the first one). */
  headOid: string | null;
  step: number;
  /** The bounded window the model sees (rebuilt from the last rows on resume). */
  history: ToolCallRecord[];
  /** path → sha256 (null: deleted) of every path the run touched; undefined until loaded. */
  manifest?: Map<string, string | null>;
}

export function stateFromRow(row: CheckpointRow | undefined, baseOid: string | null): CheckpointState {
  if (!row) return { seq: 0, prevHash: null, headOid: baseOid, step: 0, history: [], manifest: new Map() };
  // The manifest is loaded from checkpoint_manifest at the first write (one query).
  return {
    seq: row.checkpoint_seq,
    prevHash: row.hash,
    headOid: row.commit_oid ?? baseOid,
    step: row.step,
    history: row.tool_history as ToolCallRecord[],
  };
}

/**
 * How many of the last rows hold the bounded history window: each row holds its own rounds (format
 * 3 and migrated rows); a pre-008 row holds a whole window. Infinity when `chain` does not reach
 * back far enough to fill the window (then every row of `chain` is needed, and maybe more).
 */
export function historyWindowRows(
  chain: Pick<CheckpointRow, 'tool_history' | 'payload_format'>[],
  limit: number,
): number {
  const rounds = new Set<number>();
  for (let i = chain.length - 1; i >= 0; i--) {
    const row = chain[i]!;
    if ((row.payload_format ?? 1) === 1) return chain.length - i; // a whole window: nothing before it is needed
    for (const e of row.tool_history as ToolCallRecord[]) rounds.add(e.round);
    if (rounds.size > limit) return chain.length - i;
  }
  return Infinity;
}

/** The bounded history window as of the last row, from the rows' own tool calls. */
export function historyWindow(
  chain: Pick<CheckpointRow, 'tool_history' | 'payload_format'>[],
  limit: number,
): ToolCallRecord[] {
  const rows = Math.min(historyWindowRows(chain, limit), chain.length);
  return boundHistory(
    chain.slice(chain.length - rows).flatMap((row) => row.tool_history as ToolCallRecord[]),
    limit,
  );
}

/** The state to continue from: the latest row, the window from the last rows, the manifest if loaded. */
export function stateFromChain(
  chain: CheckpointRow[],
  baseOid: string | null,
  historyLimit: number,
  manifest?: ManifestEntry[],
): CheckpointState {
  const state = stateFromRow(chain.at(-1), baseOid);
  if (chain.length) state.history = historyWindow(chain, historyLimit);
  if (manifest) state.manifest = new Map(manifest.map((m) => [m.path, m.sha256]));
  return state;
}
