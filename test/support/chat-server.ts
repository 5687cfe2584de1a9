// A small real OpenAI chat-completions server for tests: answers POST /v1/chat/completions from
// a scripted list of responses (JSON, or SSE when the request asks for stream: true) and
// records every request's headers and body.

import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export type ScriptedResponse =
  | { toolCalls: Array<{ name: string; arguments: Record<string, unknown> }>; text?: string }
  | { text: string }
  | { status: number; error: string };

export interface RecordedRequest {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: any;
}

export interface ChatServer {
  /** e.g. http://127.0.0.1:40123/v1 */
  baseURL: string;
  port: number;
  requests: RecordedRequest[];
  /** Scripted responses not yet served. */
  remaining(): number;
  close(): Promise<void>;
}

export async function startChatServer(script: ScriptedResponse[]): Promise<ChatServer> {
  const queue = [...script];
  const requests: RecordedRequest[] = [];
  let served = 0;

  const server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const raw = Buffer.concat(chunks).toString('utf8');
    let body: any;
    try {
      body = raw ? JSON.parse(raw) : undefined;
    } catch {
      body = raw;
    }
    requests.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body });

    if (req.method !== 'POST' || req.url !== '/v1/chat/completions') {
      return sendError(res, 404, `no route ${req.method} ${req.url}`);
    }
    const next = queue.shift();
    if (!next) return sendError(res, 500, 'chat-server script exhausted: no scripted response left');
    if ('status' in next) return sendError(res, next.status, next.error);

    const id = `chatcmpl-${++served}`;
    const model = typeof body?.model === 'string' ? body.model : 'scripted';
    const toolCalls =
      'toolCalls' in next
        ? next.toolCalls.map((call, i) => ({
            id: `call_${served}_${i}`,
            type: 'function' as const,
            function: { name: call.name, arguments: JSON.stringify(call.arguments) },
          }))
        : undefined;
    const text = next.text ?? null;
    const finishReason = toolCalls ? 'tool_calls' : 'stop';
    const usage = { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 };

    if (body?.stream === true) {
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      const chunk = (delta: object, finish: string | null, extra: object = {}) =>
        res.write(
          `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created: 0, model, choices: [{ index: 0, delta, finish_reason: finish }], ...extra })}\n\n`,
        );
      chunk({ role: 'assistant', content: '' }, null);
      if (text) chunk({ content: text }, null);
      toolCalls?.forEach((call, index) => chunk({ tool_calls: [{ index, ...call }] }, null));
      chunk({}, finishReason, { usage });
      res.end('data: [DONE]\n\n');
      return;
    }

    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({
        id,
        object: 'chat.completion',
        created: 0,
        model,
        choices: [
          {
            index: 0,
            message: { role: 'assistant', content: text, ...(toolCalls ? { tool_calls: toolCalls } : {}) },
            finish_reason: finishReason,
          },
        ],
        usage,
      }),
    );
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;

  return {
    baseURL: `http://127.0.0.1:${port}/v1`,
    port,
    requests,
    remaining: () => queue.length,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.closeAllConnections();
        server.close((err) => (err ? reject(err) : resolve()));
      }),
  };
}

function sendError(res: ServerResponse, status: number, message: string): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ error: { message, type: 'chat_server_error', code: null } }));
}
