// A bounded reader of a Server-Sent Events body: yields the `data` of each event, parsed as JSON.
// The remote agent is hostile input, so every dimension is capped (bytes, events, one event's
// size) and a stream that ends in the middle of an event is reported, never silently accepted.
import { EchodoError } from '../../core/errors.ts';

export interface SseLimits {
  /** Bytes of one response body. */
  maxBytes: number;
  /** Events in one response. */
  maxEvents: number;
  /** Characters of one event's data. */
  maxEventChars: number;
}

export const DEFAULT_SSE_LIMITS: SseLimits = { maxBytes: 8 * 1024 * 1024, maxEvents: 5_000, maxEventChars: 512 * 1024 };

export class RemoteAgentError extends EchodoError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('remote_agent', message, options);
    this.name = 'RemoteAgentError';
  }
}

/** Each SSE event's data, JSON-parsed (an event whose data is not JSON yields `undefined`). */
export async function* readSseJson(
  body: ReadableStream<Uint8Array>,
  limits: SseLimits = DEFAULT_SSE_LIMITS,
): AsyncGenerator<unknown> {
  const decoder = new TextDecoder();
  let buffer = '';
  let bytes = 0;
  let events = 0;
  let data: string[] = [];
  let dataChars = 0;
  const reader = body.getReader();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      bytes += value.byteLength;
      if (bytes > limits.maxBytes) throw new RemoteAgentError(`the agent's response exceeded ${limits.maxBytes} bytes`);
      buffer += decoder.decode(value, { stream: true });
      let newline: number;
      while ((newline = buffer.indexOf('\n')) >= 0) {
        const line = buffer.slice(0, newline).replace(/\r$/, '');
        buffer = buffer.slice(newline + 1);
        if (line === '') {
          if (!data.length) continue;
          if (++events > limits.maxEvents) {
            throw new RemoteAgentError(`the agent sent more than ${limits.maxEvents} events in one response`);
          }
          yield parseJson(data.join('\n'));
          data = [];
          dataChars = 0;
        } else if (line.startsWith('data:')) {
          const part = line.slice(line.startsWith('data: ') ? 6 : 5);
          dataChars += part.length;
          if (dataChars > limits.maxEventChars) {
            throw new RemoteAgentError(`an event of the agent exceeded ${limits.maxEventChars} characters`);
          }
          data.push(part);
        }
        // Comments, `event:`, `id:` and `retry:` lines carry nothing AG-UI needs.
      }
      if (buffer.length > limits.maxEventChars) {
        throw new RemoteAgentError(`a line of the agent exceeded ${limits.maxEventChars} characters`);
      }
    }
    if (data.length || buffer.trim()) throw new RemoteAgentError("the agent's stream ended in the middle of an event");
  } finally {
    await reader.cancel().catch(() => {});
  }
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
