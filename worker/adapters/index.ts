// The agent of a harness whose adapter is not minimal: a remote AG-UI agent driven by the worker's
// own loop (ag-ui-model.ts). Every adapter keeps the agent's thread (the run's id, or the one the
// agent named in RUN_STARTED) and its state (STATE_SNAPSHOT, STATE_DELTA) on each checkpoint, and a
// resume sends both back. The adapters differ only in what they add to each input:
//  - remote-ag-ui: nothing.
//  - langgraph: LangGraph's AG-UI servers key the graph's own checkpointer by the AG-UI threadId;
//    the thread also goes as forwardedProps.config.configurable.thread_id, for servers (the
//    LangGraph Platform agent) that merge forwardedProps.config into the run's config.
//  - crewai: nothing more: a flow's state is the AG-UI state every adapter keeps (a named alias).
import { assertKeyGranted, type KeyGrant } from '../../core/key-grants.ts';
import { assertKeyVarAllowed } from '../../core/key-vars.ts';
import { EchodoError } from '../../core/errors.ts';
import type { Harness } from '../run/harnesses.ts';
import type { ToolCallRecord } from '../checkpoints/history.ts';
import { AgUiModel, type RemoteAgentState } from './ag-ui-model.ts';
import { priorRoundsAsMessages, type RoundIds } from './conversation.ts';

/** One AG-UI run (one round of the remote agent's thinking) at most this long. */
export const REMOTE_ROUND_TIMEOUT_MS = 120_000;

export interface RemoteAgentArgs {
  agentRunId: string;
  attempt: number;
  /** The checkpoint's rounds, read when the first call is made (the session has its state by then). */
  history: () => readonly ToolCallRecord[];
  /** The round the loop's next tool calls will be (its step, plus one). */
  nextRound: () => number;
  /** The agent's thread and state on the last checkpoint (worker_checkpoints.agent_state), if any. */
  resumed?: unknown;
  keyGrant?: KeyGrant;
  keyVarGlobs?: readonly string[];
  env?: NodeJS.ProcessEnv;
  timeoutMs?: number;
}

export function remoteAgentModel(harness: Harness, args: RemoteAgentArgs): { model: AgUiModel; description: string } {
  if (harness.adapter === 'minimal' || !harness.endpointUrl) {
    throw new EchodoError('harness_unknown', `harness ${harness.alias} has no remote agent endpoint`);
  }
  const url = harness.endpointUrl;
  let bearer: string | undefined;
  if (harness.keyEnvVar) {
    // Checked again here, at call time: the grant may have been revoked since the row was written.
    assertKeyVarAllowed(harness.keyEnvVar, args.keyVarGlobs);
    assertKeyGranted(harness.keyEnvVar, args.keyGrant, url);
    bearer = (args.env ?? process.env)[harness.keyEnvVar];
    if (!bearer) throw new EchodoError('model_unknown', `harness ${harness.alias}: ${harness.keyEnvVar} is not set`);
  }
  const forwardedProps = (threadId: string) =>
    harness.adapter === 'langgraph' ? { config: { configurable: { thread_id: threadId } } } : {};
  const resumed = recordedAgentState(args.resumed);
  let prior: ReturnType<typeof priorRoundsAsMessages> | undefined;
  const model = new AgUiModel({
    url,
    threadId: args.agentRunId,
    attempt: args.attempt,
    get prior() {
      prior ??= priorRoundsAsMessages(args.history(), resumed?.rounds);
      return prior;
    },
    bearer,
    timeoutMs: args.timeoutMs ?? REMOTE_ROUND_TIMEOUT_MS,
    forwardedProps,
    resumed,
    nextRound: args.nextRound,
    adapter: harness.adapter,
  });
  return { model, description: `${harness.adapter} agent at ${new URL(url).host}` };
}

/** A checkpoint's agent_state as the model takes it back (a row written by hand may hold anything). */
function recordedAgentState(value: unknown): RemoteAgentState | undefined {
  if (!value || typeof value !== 'object' || Array.isArray(value)) return undefined;
  const { threadId, state, rounds } = value as Record<string, unknown>;
  return {
    ...(typeof threadId === 'string' && threadId ? { threadId } : {}),
    ...(state === undefined ? {} : { state }),
    rounds: Array.isArray(rounds) ? rounds.filter(isRoundIds) : [],
  };
}

function isRoundIds(r: unknown): r is RoundIds {
  const { round, messageId, callIds } = (r ?? {}) as Record<string, unknown>;
  return (
    Number.isInteger(round) &&
    (messageId === undefined || typeof messageId === 'string') &&
    Array.isArray(callIds) &&
    callIds.every((c) => typeof c === 'string')
  );
}
