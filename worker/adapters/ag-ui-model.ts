// A remote AG-UI agent seen as a LanguageModelV3: each model call of the worker's loop is one AG-UI
// run (the conversation so far and the harness's tools as frontend tools in, the agent's text and
// tool calls out). So the remote agent runs in the very loop the minimal adapter runs in: the same
// tool implementations, confinement, allowlists, step budget and checkpoint after every tool round
// (worker/run/session.ts), with nothing duplicated here.
import type { Message, RunAgentInput, Tool } from '@ag-ui/core';
import type {
  LanguageModelV3,
  LanguageModelV3CallOptions,
  LanguageModelV3Content,
  LanguageModelV3GenerateResult,
  LanguageModelV3StreamPart,
  LanguageModelV3StreamResult,
  LanguageModelV3Usage,
} from '@ai-sdk/provider';
import { runAgUi, safeId, type AgUiRunResult } from './ag-ui-client.ts';
import { promptAsMessages, type RoundIds } from './conversation.ts';
import { redactString } from '../../core/redact.ts';
import type { SseLimits } from './sse.ts';

/** A remote agent's own part of a checkpoint (worker_checkpoints.agent_state). */
export interface RemoteAgentState {
  threadId?: string;
  state?: unknown;
  /** The agent's ids of the last tool rounds, so a resumed conversation reuses them. */
  rounds?: RoundIds[];
}

/** Tool rounds whose ids a checkpoint keeps (the conversation's window is no longer). */
const MAX_ROUND_IDS = 64;

const NO_USAGE: LanguageModelV3Usage = {
  inputTokens: { total: undefined, noCache: undefined, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: undefined, text: undefined, reasoning: undefined },
};

export interface AgUiModelOptions {
  url: string;
  /** The AG-UI thread: the run's id, the same on every attempt, so a resume continues the agent's thread. */
  threadId: string;
  /** Distinguishes this attempt's AG-UI runs from an earlier attempt's. */
  attempt: number;
  /** Rounds done by earlier attempts (from the checkpoint), re-sent ahead of this attempt's. */
  prior: Message[];
  /** The round the next tool calls will be (the loop's step, plus one). */
  nextRound: () => number;
  bearer?: string;
  /** One AG-UI run (one model call) at most this long. */
  timeoutMs: number;
  /** What the adapter adds to every input (a framework's conventions, worker/adapters/index.ts). */
  forwardedProps?: (threadId: string) => Record<string, unknown>;
  /** The agent's thread and state as the last checkpoint recorded them (a resume goes on from there). */
  resumed?: RemoteAgentState;
  limits?: SseLimits;
  /** The adapter's name, as the model's provider. */
  adapter: string;
}

export class AgUiModel implements LanguageModelV3 {
  readonly specificationVersion = 'v3' as const;
  readonly provider: string;
  readonly modelId: string;
  readonly supportedUrls: Record<string, RegExp[]> = {};
  private calls = 0;
  /** The agent's state after its last run, handed back as the next run's state (CrewAI flows keep theirs there). */
  private state: unknown;
  /** The thread the runs go to: the agent's own once it named one in RUN_STARTED (a framework may). */
  private threadId: string;
  /** The agent's ids of its tool rounds, the checkpointed ones first. */
  private rounds: RoundIds[];

  constructor(private readonly options: AgUiModelOptions) {
    this.provider = `ag-ui:${options.adapter}`;
    this.modelId = new URL(options.url).host;
    this.state = options.resumed?.state ?? {};
    this.threadId = options.resumed?.threadId ?? options.threadId;
    this.rounds = options.resumed?.rounds ?? [];
  }

  /** What a checkpoint records for the agent: its thread and its state as of the last run. */
  agentState(): RemoteAgentState {
    return { threadId: this.threadId, state: this.state, rounds: this.rounds };
  }

  async doGenerate(call: LanguageModelV3CallOptions): Promise<LanguageModelV3GenerateResult> {
    const runId = `${this.options.threadId}:${this.options.attempt}:${this.calls++}`;
    const input: RunAgentInput = {
      threadId: this.threadId,
      runId,
      messages: promptAsMessages(call.prompt, this.options.prior, this.rounds),
      tools: (call.tools ?? []).flatMap((t): Tool[] =>
        t.type === 'function' ? [{ name: t.name, description: t.description ?? '', parameters: t.inputSchema }] : [],
      ),
      context: [],
      state: this.state,
      forwardedProps: this.options.forwardedProps?.(this.threadId) ?? {},
    };
    const result = await runAgUi({
      url: this.options.url,
      input,
      bearer: this.options.bearer,
      timeoutMs: this.options.timeoutMs,
      signal: call.abortSignal,
      limits: this.options.limits,
    });
    if (result.state !== undefined) this.state = result.state;
    if (result.toolCalls.length) {
      const round = this.options.nextRound();
      const ids = { round, messageId: result.messageId, callIds: result.toolCalls.map((c) => safeId(c.id) ?? '') };
      this.rounds = [...this.rounds.filter((r) => r.round < round), ids].slice(-MAX_ROUND_IDS);
    }
    // A thread id is hostile input too: kept only when it looks like an id.
    if (result.threadId && /^[\w.:@-]{1,200}$/.test(result.threadId)) this.threadId = redactString(result.threadId);
    const content = contentOf(result);
    return {
      content,
      finishReason: result.toolCalls.length
        ? { unified: 'tool-calls', raw: 'tool-calls' }
        : { unified: 'stop', raw: 'stop' },
      usage: NO_USAGE,
      warnings: [],
      response: { id: runId, modelId: this.modelId },
    };
  }

  async doStream(call: LanguageModelV3CallOptions): Promise<LanguageModelV3StreamResult> {
    const { content, finishReason } = await this.doGenerate(call);
    const parts: LanguageModelV3StreamPart[] = [{ type: 'stream-start', warnings: [] }];
    for (const part of content) {
      if (part.type === 'text') {
        parts.push(
          { type: 'text-start', id: 't' },
          { type: 'text-delta', id: 't', delta: part.text },
          { type: 'text-end', id: 't' },
        );
      } else if (part.type === 'tool-call') parts.push(part);
    }
    parts.push({ type: 'finish', usage: NO_USAGE, finishReason });
    return { stream: new ReadableStream({ start: (c) => (parts.forEach((p) => c.enqueue(p)), c.close()) }) };
  }
}

/**
 * Tool calls go to the loop as the agent sent them: an unknown tool or arguments that are not
 * JSON become the loop's tool error for that call, returned to the agent (the run goes on).
 */
function contentOf(result: AgUiRunResult): LanguageModelV3Content[] {
  const content: LanguageModelV3Content[] = [];
  if (result.text) content.push({ type: 'text', text: result.text });
  for (const call of result.toolCalls) {
    content.push({ type: 'tool-call', toolCallId: call.id, toolName: call.name, input: call.args || '{}' });
  }
  return content;
}
