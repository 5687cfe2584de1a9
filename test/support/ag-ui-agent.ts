// A real AG-UI agent for tests, on loopback, speaking the wire format with @ag-ui/encoder: scripted
// like the replay model. Which entry it plays is read from the conversation it is sent (the number
// of tool rounds already in it), so a resumed client that re-sends the conversation gets the next
// round, and a round is never played twice unless the client lost it. Each path is an agent of
// its own (`/<name>`); a script entry may also be raw SSE text, to send what no honest agent would.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { EventType, type BaseEvent, type RunAgentInput } from '@ag-ui/core';
import { EventEncoder } from '@ag-ui/encoder';

/** The agent's state events of a round, sent before its tool calls (a CrewAI flow's way). */
interface StateEvents {
  snapshot?: Record<string, unknown>;
  delta?: Record<string, unknown>[];
}

export type AgentEntry =
  | ({
      toolCalls: { name: string; args: string }[];
      /** Before the entry's first play. */ delayMs?: number;
    } & StateEvents)
  | ({ text: string; delayMs?: number } & StateEvents)
  | { raw: string }
  | { status: number; body: string };

export interface AgUiAgent {
  url(name: string): string;
  /** Every input received, per agent. */
  inputs: Map<string, RunAgentInput[]>;
  /** Tool rounds played, per agent (a round played twice counts twice). */
  roundsPlayed: Map<string, number[]>;
  /** The authorization header of every request, in order ('' when absent). */
  authorizations: string[];
  close(): Promise<void>;
}

const roundsIn = (input: RunAgentInput) =>
  input.messages.filter((m) => m.role === 'assistant' && m.toolCalls?.length).length;

export async function startAgUiAgent(scripts: Record<string, AgentEntry[]>): Promise<AgUiAgent> {
  const inputs = new Map<string, RunAgentInput[]>();
  const roundsPlayed = new Map<string, number[]>();
  const authorizations: string[] = [];
  const delayed = new Set<string>();
  const server: Server = createServer((req, res) => {
    const name = (req.url ?? '/').slice(1);
    authorizations.push(req.headers.authorization ?? '');
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', async () => {
      const input = JSON.parse(Buffer.concat(chunks).toString('utf8')) as RunAgentInput;
      inputs.set(name, [...(inputs.get(name) ?? []), input]);
      const script = scripts[name];
      const index = roundsIn(input);
      const entry = script?.[index] ?? { text: '(script ended)' };
      if ('status' in entry) return void res.writeHead(entry.status).end(entry.body);
      const encoder = new EventEncoder(); // SSE only
      res.writeHead(200, { 'content-type': encoder.getContentType(), 'cache-control': 'no-cache' });
      if ('raw' in entry) return void res.end(entry.raw);
      // A delay holds the entry's first play only (a client that lost that round gets it at once).
      const key = `${name}#${index}`;
      if (entry.delayMs && !delayed.has(key)) {
        delayed.add(key);
        await new Promise((r) => setTimeout(r, entry.delayMs));
      }
      const send = (e: BaseEvent & Record<string, unknown>) => res.write(encoder.encodeSSE(e as BaseEvent));
      send({ type: EventType.RUN_STARTED, threadId: input.threadId, runId: input.runId });
      if (entry.snapshot) send({ type: EventType.STATE_SNAPSHOT, snapshot: entry.snapshot });
      if (entry.delta) send({ type: EventType.STATE_DELTA, delta: entry.delta });
      if ('toolCalls' in entry) {
        roundsPlayed.set(name, [...(roundsPlayed.get(name) ?? []), index]);
        entry.toolCalls.forEach((call, i) => {
          const toolCallId = `${input.runId}-${i}`;
          // The assistant message's id is the agent's own, as a LangGraph server's is.
          const parentMessageId = `msg-${input.runId}`;
          send({ type: EventType.TOOL_CALL_START, toolCallId, toolCallName: call.name, parentMessageId });
          // The arguments in two fragments, as a streaming model would send them.
          const cut = Math.floor(call.args.length / 2);
          send({ type: EventType.TOOL_CALL_ARGS, toolCallId, delta: call.args.slice(0, cut) });
          send({ type: EventType.TOOL_CALL_ARGS, toolCallId, delta: call.args.slice(cut) });
          send({ type: EventType.TOOL_CALL_END, toolCallId });
        });
      } else {
        send({ type: EventType.TEXT_MESSAGE_START, messageId: `${input.runId}-m`, role: 'assistant' });
        send({ type: EventType.TEXT_MESSAGE_CONTENT, messageId: `${input.runId}-m`, delta: entry.text });
        send({ type: EventType.TEXT_MESSAGE_END, messageId: `${input.runId}-m` });
      }
      send({ type: EventType.RUN_FINISHED, threadId: input.threadId, runId: input.runId });
      res.end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: (name) => `http://127.0.0.1:${port}/${name}`,
    inputs,
    roundsPlayed,
    authorizations,
    close: () => new Promise((resolve) => (server.closeAllConnections(), server.close(() => resolve()))),
  };
}

/** An SSE frame of an arbitrary event, for hostile scripts. */
export const frame = (event: Record<string, unknown>): string => `data: ${JSON.stringify(event)}\n\n`;
