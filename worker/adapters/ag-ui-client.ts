// One AG-UI run against a remote agent: POST a RunAgentInput, read the SSE stream of events, and
// fold it into what the worker needs (the assistant's text and its tool calls). Events are
// validated with @ag-ui/core's schemas; an event that does not validate, or of a type the worker
// has no use for, is ignored. A RUN_ERROR, an HTTP error, a cut stream or a timeout is an error
// whose message is redacted and bounded: it may end up in a run's failure reason.
import { EventType, type RunAgentInput } from '@ag-ui/core';
import { EventSchemas } from '@ag-ui/core/schemas';
import { redactOrDrop, redactString } from '../../core/redact.ts';
import { applyJsonPatch } from './json-patch.ts';
import { errorWithCauses } from '../../core/errors.ts';
import { DEFAULT_SSE_LIMITS, readSseJson, RemoteAgentError, type SseLimits } from './sse.ts';

export interface AgUiToolCall {
  id: string;
  name: string;
  /** The arguments as the agent streamed them: JSON text, not yet parsed (it may be malformed). */
  args: string;
}

export interface AgUiRunResult {
  text: string;
  toolCalls: AgUiToolCall[];
  /** RUN_STARTED's ids, as the agent reported them. */
  threadId?: string;
  /** The agent's id of its assistant message (a tool call's parentMessageId, else its text message's). */
  messageId?: string;
  runId?: string;
  /**
   * The agent's state after its STATE_SNAPSHOT and STATE_DELTA events (a framework's own state, e.g.
   * a CrewAI flow's), redacted and bounded; undefined when the run sent neither.
   */
  state?: unknown;
}

export interface AgUiRequest {
  url: string;
  input: RunAgentInput;
  /** A bearer key for the endpoint (already checked against the grant's hosts). */
  bearer?: string;
  timeoutMs: number;
  signal?: AbortSignal;
  limits?: SseLimits;
  /** Called for each accepted event (the probe and tests watch the stream). */
  onEvent?(type: string): void;
}

const MAX_TOOL_CALLS = 32;
const MAX_TEXT_CHARS = 64 * 1024;
const MAX_STATE_CHARS = 16 * 1024;

/** A state safe to store and to send back: redacted, and replaced by a marker when too large. */
export function boundedState(state: unknown): unknown {
  const safe = redactOrDrop(state ?? null);
  const text = JSON.stringify(safe);
  return text.length <= MAX_STATE_CHARS ? safe : { dropped: 'state too large' };
}

/** An id of the agent's, kept and sent back only when it looks like an id and holds no secret. */
export function safeId(id: string | undefined): string | undefined {
  return id && /^[\w.:@-]{1,200}$/.test(id) && redactString(id) === id ? id : undefined;
}

/** A reason safe to store: redacted first, then cut. */
export const safeReason = (text: string): string => redactString(text).slice(0, 500);

export async function runAgUi(req: AgUiRequest): Promise<AgUiRunResult> {
  const timeout = AbortSignal.timeout(req.timeoutMs);
  const signal = req.signal ? AbortSignal.any([req.signal, timeout]) : timeout;
  try {
    const response = await fetch(req.url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'text/event-stream',
        ...(req.bearer ? { authorization: `Bearer ${req.bearer}` } : {}),
      },
      body: JSON.stringify(req.input),
      signal,
      redirect: 'error', // a redirect could carry the key to another host
    });
    if (!response.ok || !response.body) {
      const body = await response.text().catch(() => '');
      throw new RemoteAgentError(safeReason(`the agent answered HTTP ${response.status}: ${body.slice(0, 300)}`));
    }
    return await foldEvents(response.body, req);
  } catch (err) {
    if (timeout.aborted && !req.signal?.aborted) {
      throw new RemoteAgentError(`the agent did not finish within ${Math.round(req.timeoutMs / 1000)} s`);
    }
    if (err instanceof RemoteAgentError || req.signal?.aborted) throw err;
    throw new RemoteAgentError(safeReason(`the agent could not be reached: ${errorWithCauses(err)}`), { cause: err });
  }
}

async function foldEvents(body: ReadableStream<Uint8Array>, req: AgUiRequest): Promise<AgUiRunResult> {
  const result: AgUiRunResult = { text: '', toolCalls: [] };
  const open = new Map<string, AgUiToolCall>();
  const maxArgs = (req.limits ?? DEFAULT_SSE_LIMITS).maxEventChars;
  let finished = false;
  // The agent's state: the input's, then each snapshot or delta on top of it (deltas build on it).
  let state: unknown = req.input.state ?? {};
  let stateChanged = false;
  let textMessageId: string | undefined;
  for await (const raw of readSseJson(body, req.limits)) {
    const parsed = EventSchemas.safeParse(raw);
    if (!parsed.success) continue; // not an AG-UI event the schemas know: ignored
    const event = parsed.data;
    req.onEvent?.(event.type);
    switch (event.type) {
      case EventType.RUN_STARTED:
        result.threadId = event.threadId;
        result.runId = event.runId;
        break;
      case EventType.TEXT_MESSAGE_START:
        textMessageId ??= safeId(event.messageId);
        break;
      case EventType.TEXT_MESSAGE_CONTENT:
        if (result.text.length < MAX_TEXT_CHARS) result.text = (result.text + event.delta).slice(0, MAX_TEXT_CHARS);
        break;
      case EventType.TOOL_CALL_START: {
        if (open.size + result.toolCalls.length >= MAX_TOOL_CALLS) {
          throw new RemoteAgentError(`the agent asked for more than ${MAX_TOOL_CALLS} tool calls in one round`);
        }
        const id = event.toolCallId.slice(0, 200);
        result.messageId ??= safeId(event.parentMessageId);
        open.set(event.toolCallId, { id, name: event.toolCallName.slice(0, 200), args: '' });
        break;
      }
      case EventType.TOOL_CALL_ARGS: {
        const call = open.get(event.toolCallId);
        if (!call) break; // arguments of a call never started: ignored
        call.args += event.delta;
        if (call.args.length > maxArgs) {
          throw new RemoteAgentError(`the arguments of one tool call exceeded ${maxArgs} characters`);
        }
        break;
      }
      case EventType.TOOL_CALL_END: {
        const call = open.get(event.toolCallId);
        if (call) {
          open.delete(event.toolCallId);
          result.toolCalls.push(call);
        }
        break;
      }
      case EventType.STATE_SNAPSHOT:
        state = event.snapshot ?? null;
        stateChanged = true;
        break;
      case EventType.STATE_DELTA:
        try {
          state = applyJsonPatch(state, event.delta);
          stateChanged = true;
        } catch {
          // A patch that does not apply to the state it was meant for: the state stays as it was.
        }
        break;
      case EventType.RUN_ERROR:
        throw new RemoteAgentError(
          safeReason(`the agent reported an error: ${event.message}${event.code ? ` (${event.code})` : ''}`),
        );
      case EventType.RUN_FINISHED:
        finished = true;
        break;
      default:
        break; // steps, reasoning, activity, custom events: nothing the worker acts on
    }
    if (finished) break;
  }
  if (!finished) throw new RemoteAgentError("the agent's stream ended without RUN_FINISHED");
  if (stateChanged) result.state = boundedState(state);
  result.messageId ??= textMessageId;
  // A call started but never ended is dropped: its arguments may be incomplete.
  return result;
}
