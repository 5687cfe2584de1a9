// The rows a resume reads. A resume needs the latest row (seq, commit, tree, manifest digest) and
// the rows holding the last WORKER_CHECKPOINT_HISTORY_LIMIT rounds, not the whole run: reading and
// hashing every row made resume cost grow with the run's length. So it reads a bounded tail and
// verifies it as a chain anchored at the hash of the row just before it; the manifest (every file
// the run ever touched) is still verified in full against the latest row's digest, which is in
// the chain. The whole chain, row by row, is integrity-check's job. Rows migrated from the old
// cumulative formats (1 and 2) need the fold from seq 1, so a tail holding one reads everything.
import { DELTA_FORMAT, type ChainAnchor } from '../../core/checkpoint-hash.ts';
import { checkpointChain, checkpointTail, type CheckpointRow } from '../../store/checkpoints.ts';
import { chainAnchors } from '../../store/retention.ts';
import type { WorkspaceTx } from '../../store/workspace.ts';
import { historyWindowRows } from './state.ts';

export interface ResumeChain {
  /** The rows to verify and continue from, in seq order (the whole run, or its tail). */
  chain: CheckpointRow[];
  /** What the first row links to: the row before the tail's hash, or the run's anchors (pruning's, a fork's). */
  anchor: ChainAnchor[] | string;
  /** True when `chain` is only the run's last rows. */
  partial: boolean;
}

export async function loadResumeChain(tx: WorkspaceTx, agentRunId: string, historyLimit: number): Promise<ResumeChain> {
  // One row per round, plus slack for rows that carry no round, plus the anchor row.
  const want = 2 * historyLimit + 2;
  const tail = await checkpointTail(tx, agentRunId, want);
  const whole = async (): Promise<ResumeChain> => {
    const [chain, anchor] = await Promise.all([
      tail.length < want ? tail : checkpointChain(tx, agentRunId),
      chainAnchors(tx, agentRunId),
    ]);
    return { chain, anchor, partial: false };
  };
  if (tail.length < want) return whole();
  const [anchorRow, ...rows] = tail;
  const allDeltas = tail.every((row) => (row.payload_format ?? 1) === DELTA_FORMAT);
  // A tail across a retention gap (the first row kept, then the last ones) links to the run's anchor.
  const contiguous = anchorRow!.checkpoint_seq + 1 === rows[0]!.checkpoint_seq;
  if (!allDeltas || !contiguous || historyWindowRows(rows, historyLimit) === Infinity) return whole();
  return { chain: rows, anchor: anchorRow!.hash, partial: true };
}
