// A fork's first attempt, the worker's side: it starts from its source's checkpoint N (the seed
// operator/fork.ts recorded on the run): N's step and history, N's hash as its chain's anchor.
import type { ToolCallRecord } from '../checkpoints/history.ts';
import { stateFromRow, type CheckpointState } from '../checkpoints/state.ts';

export interface ForkSeed {
  step: number;
  hash: string;
  commitOid: string | null;
  history: unknown[];
}

/** The state a fork's first attempt starts from: N's step and history, N's hash as the anchor. */
export function forkStartState(seed: ForkSeed, baseOid: string | null): CheckpointState {
  return {
    ...stateFromRow(undefined, baseOid),
    prevHash: seed.hash,
    headOid: seed.commitOid ?? baseOid,
    step: seed.step,
    history: seed.history as ToolCallRecord[],
  };
}
