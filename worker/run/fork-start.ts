// A fork's first attempt, the worker's side: it starts from its source's checkpoint N (the seed
// operator/fork.ts recorded on the run): N's step and history, N's hash as its chain's anchor.
import type { ToolCallRecord } from '../checkpoints/history.ts';
import { stateFromRow, type CheckpointState } from '../checkpoints/state.ts';

export interface ForkSeed {
  step: number;
  hash: string;
  commitOid: string | null;
  history: unknown[];
  /**
   * A remote agent's state and round ids as checkpoint N recorded them (worker_checkpoints.agent_state),
   * so the fork's agent goes on from the state it had there; absent for the minimal loop.
   */
  agentState?: Record<string, unknown> | null;
}

/**
 * What a fork's remote agent starts from: the source's agent state at N without its thread, so the
 * fork runs on a thread of its own (its run id) and never writes into the source's thread.
 */
export function forkAgentState(seed: ForkSeed | null | undefined): Record<string, unknown> | undefined {
  if (!seed?.agentState || typeof seed.agentState !== 'object') return undefined;
  const { threadId: _sourceThread, ...rest } = seed.agentState;
  return rest;
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
