// The agent of a harness whose adapter is not minimal: a remote AG-UI agent driven by the worker's
// own loop (ag-ui-model.ts). The adapters differ only in the conventions they add to each input:
//  - remote-ag-ui: none; the thread id is the run's id, the same on every attempt.
//  - langgraph: LangGraph's AG-UI server keys its own checkpointer thread by the AG-UI threadId, so
//    the run's id (stable across attempts) makes a resume continue LangGraph's own thread; the
//    worker also forwards it as configurable.thread_id for servers that read the config.
//  - crewai: a CrewAI flow's state travels as AG-UI state: the last STATE_SNAPSHOT is handed back
//    on the next call (every adapter does this; it is what a flow needs).
import { assertKeyGranted, type KeyGrant } from '../../core/key-grants.ts';
import { assertKeyVarAllowed } from '../../core/key-vars.ts';
import { EchodoError } from '../../core/errors.ts';
import type { Harness } from '../run/harnesses.ts';
import type { ToolCallRecord } from '../checkpoints/history.ts';
import { AgUiModel } from './ag-ui-model.ts';
import { priorRoundsAsMessages } from './conversation.ts';

/** One AG-UI run (one round of the remote agent's thinking) at most this long. */
export const REMOTE_ROUND_TIMEOUT_MS = 120_000;

export interface RemoteAgentArgs {
  agentRunId: string;
  attempt: number;
  /** The checkpoint's rounds, read when the first call is made (the session has its state by then). */
  history: () => readonly ToolCallRecord[];
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
  const forwardedProps =
    harness.adapter === 'langgraph' ? { config: { configurable: { thread_id: args.agentRunId } } } : {};
  let prior: ReturnType<typeof priorRoundsAsMessages> | undefined;
  const model = new AgUiModel({
    url,
    threadId: args.agentRunId,
    attempt: args.attempt,
    get prior() {
      prior ??= priorRoundsAsMessages(args.history());
      return prior;
    },
    bearer,
    timeoutMs: args.timeoutMs ?? REMOTE_ROUND_TIMEOUT_MS,
    forwardedProps,
    adapter: harness.adapter,
  });
  return { model, description: `${harness.adapter} agent at ${new URL(url).host}` };
}
