// Loopback servers speaking the native providers' wire formats, for tests: Anthropic's Messages API
// (POST /v1/messages) and OpenAI's Responses API (POST /v1/responses), each answering from a
// scripted list (JSON, or SSE when the request asks for stream: true) with the usage blocks those
// APIs send, and recording every request's headers and body.
import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface NativeScripted {
  toolCalls?: Array<{ name: string; arguments: Record<string, unknown> }>;
  text?: string;
  /** The provider's own usage block, sent as is. */
  usage: Record<string, unknown>;
  model?: string;
}

export interface NativeRequest {
  url: string;
  headers: IncomingHttpHeaders;
  body: any;
}

export interface NativeServer {
  /** e.g. http://127.0.0.1:40123/v1 */
  baseURL: string;
  requests: NativeRequest[];
  close(): Promise<void>;
}

type Responder = (res: ServerResponse, next: NativeScripted, n: number, body: any) => void;

async function startServer(route: string, respond: Responder, script: NativeScripted[]): Promise<NativeServer> {
  const queue = [...script];
  const requests: NativeRequest[] = [];
  let served = 0;
  const server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const raw = Buffer.concat(chunks).toString('utf8');
    const body = raw ? JSON.parse(raw) : undefined;
    requests.push({ url: req.url ?? '', headers: req.headers, body });
    const next = queue.shift();
    if (req.method !== 'POST' || req.url !== route || !next) {
      res.writeHead(next ? 404 : 500, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({ type: 'error', error: { type: 'not_found_error', message: `no answer for ${req.url}` } }),
      );
      return;
    }
    respond(res, next, ++served, body);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  return {
    baseURL: `http://127.0.0.1:${port}/v1`,
    requests,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.closeAllConnections();
        server.close((err) => (err ? reject(err) : resolve()));
      }),
  };
}

const sse = (res: ServerResponse, events: Array<{ event?: string; data: unknown }>) => {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  for (const e of events) res.write(`${e.event ? `event: ${e.event}\n` : ''}data: ${JSON.stringify(e.data)}\n\n`);
  res.end();
};

/** Anthropic's Messages API. */
export function startAnthropicServer(script: NativeScripted[]): Promise<NativeServer> {
  return startServer(
    '/v1/messages',
    (res, next, n, body) => {
      const content: unknown[] = [];
      if (next.text) content.push({ type: 'text', text: next.text });
      next.toolCalls?.forEach((c, i) =>
        content.push({ type: 'tool_use', id: `toolu_${n}_${i}`, name: c.name, input: c.arguments }),
      );
      const stopReason = next.toolCalls ? 'tool_use' : 'end_turn';
      const message = {
        id: `msg_${n}`,
        type: 'message',
        role: 'assistant',
        model: next.model ?? body?.model,
        content,
        stop_reason: stopReason,
        stop_sequence: null,
        usage: next.usage,
      };
      if (body?.stream !== true) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify(message));
        return;
      }
      const events: Array<{ event: string; data: unknown }> = [
        {
          event: 'message_start',
          data: { type: 'message_start', message: { ...message, content: [], stop_reason: null } },
        },
      ];
      content.forEach((block: any, index) => {
        const start = block.type === 'text' ? { type: 'text', text: '' } : { ...block, input: {} };
        events.push({
          event: 'content_block_start',
          data: { type: 'content_block_start', index, content_block: start },
        });
        const delta =
          block.type === 'text'
            ? { type: 'text_delta', text: block.text }
            : { type: 'input_json_delta', partial_json: JSON.stringify(block.input) };
        events.push({ event: 'content_block_delta', data: { type: 'content_block_delta', index, delta } });
        events.push({ event: 'content_block_stop', data: { type: 'content_block_stop', index } });
      });
      events.push(
        {
          event: 'message_delta',
          data: { type: 'message_delta', delta: { stop_reason: stopReason, stop_sequence: null }, usage: next.usage },
        },
        { event: 'message_stop', data: { type: 'message_stop' } },
      );
      sse(res, events);
    },
    script,
  );
}

/** OpenAI's Responses API (what @ai-sdk/openai uses by default). */
export function startOpenAIResponsesServer(script: NativeScripted[]): Promise<NativeServer> {
  return startServer(
    '/v1/responses',
    (res, next, n, body) => {
      const output: unknown[] = [];
      next.toolCalls?.forEach((c, i) =>
        output.push({
          type: 'function_call',
          id: `fc_${n}_${i}`,
          call_id: `call_${n}_${i}`,
          name: c.name,
          arguments: JSON.stringify(c.arguments),
          status: 'completed',
        }),
      );
      if (next.text) {
        output.push({
          type: 'message',
          id: `msg_${n}`,
          role: 'assistant',
          status: 'completed',
          content: [{ type: 'output_text', text: next.text, annotations: [] }],
        });
      }
      const response = {
        id: `resp_${n}`,
        object: 'response',
        created_at: 1_700_000_000,
        status: 'completed',
        model: next.model ?? body?.model,
        output,
        incomplete_details: null,
        usage: next.usage,
      };
      if (body?.stream !== true) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify(response));
        return;
      }
      const events: Array<{ data: unknown }> = [
        {
          data: { type: 'response.created', response: { ...response, status: 'in_progress', output: [], usage: null } },
        },
      ];
      output.forEach((item: any, output_index) => {
        if (item.type === 'message') {
          events.push({ data: { type: 'response.output_item.added', output_index, item: { ...item, content: [] } } });
          events.push({
            data: {
              type: 'response.output_text.delta',
              item_id: item.id,
              output_index,
              content_index: 0,
              delta: item.content[0].text,
              logprobs: [],
            },
          });
        } else {
          events.push({ data: { type: 'response.output_item.added', output_index, item: { ...item, arguments: '' } } });
          events.push({
            data: {
              type: 'response.function_call_arguments.delta',
              item_id: item.id,
              output_index,
              delta: item.arguments,
            },
          });
        }
        events.push({ data: { type: 'response.output_item.done', output_index, item } });
      });
      events.push({ data: { type: 'response.completed', response } });
      sse(res, events);
    },
    script,
  );
}
