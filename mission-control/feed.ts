// An SSE response fed by the ChangeHub: `ready` once subscribed (so a client knows nothing
// after it is missed), `change` per notification, `resync` after the LISTEN connection
// dropped and came back, and a comment every 25 s so proxies keep the stream open.
import type { Context } from 'hono';
import { streamSSE, type SSEMessage } from 'hono/streaming';
import type { ChangeHub } from './sse-hub.ts';

const KEEP_ALIVE_MS = 25_000;
const RECONNECT_MS = 2_000;

export function changeFeed(c: Context, hub: ChangeHub, workspaceId: string | null): Response {
  return streamSSE(c, async (stream) => {
    let finish!: () => void;
    const finished = new Promise<void>((resolve) => (finish = resolve));
    stream.onAbort(finish);
    const send = (message: SSEMessage) => {
      if (!stream.aborted && !stream.closed) stream.writeSSE(message).catch(finish);
    };
    const unsubscribe = hub.subscribe({
      workspaceId,
      change: (payload) => send({ event: 'change', data: payload }),
      resync: () => send({ event: 'resync', data: '{}' }),
      end: finish,
    });
    const keepAlive = setInterval(() => {
      stream.write(': keep-alive\n\n').catch(finish);
    }, KEEP_ALIVE_MS);
    try {
      await stream.writeSSE({ event: 'ready', data: JSON.stringify({ workspaceId }), retry: RECONNECT_MS });
      await finished;
    } finally {
      clearInterval(keepAlive);
      unsubscribe();
    }
  });
}
