// While Postgres is away every page and API call answers 503 with a plain message (and
// Retry-After), never an error page with a stack trace. The outage is logged once when the first
// request meets it and once when a request succeeds again, not once per request.
import type { Context, MiddlewareHandler } from 'hono';
import { OutageWatch } from '../worker/db-wait.ts';
import type { Logger } from '../worker/log.ts';
import type { McEnv } from './context.ts';
import { sendPage } from './layout.ts';
import { messageContent } from './pages-admin.ts';

export const RETRY_AFTER_S = 5;
const TITLE = 'Database unavailable';
export const UNAVAILABLE_MESSAGE = 'The database is unavailable; mission control answers again as soon as it is back.';

export interface OutageGate {
  /** Notes the end of an outage at the first request that succeeds after it. */
  watch: MiddlewareHandler<McEnv>;
  /** The 503 for a request that found the database away. */
  respond(c: Context<McEnv>, json: boolean, err: unknown): Response;
}

export function outageGate(log: Logger): OutageGate {
  const outage = new OutageWatch(log, 'mission control');
  return {
    watch: async (c, next) => {
      await next();
      if (outage.isDown && c.res.status < 500) outage.up();
    },
    respond(c, json, err) {
      outage.down(err);
      c.header('Retry-After', String(RETRY_AFTER_S));
      return json
        ? c.json({ error: 'database_unavailable', message: UNAVAILABLE_MESSAGE }, 503)
        : sendPage(c, { title: TITLE, content: messageContent(TITLE, UNAVAILABLE_MESSAGE) }, 503);
    },
  };
}
