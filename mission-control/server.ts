// Mission control: the operator panel and its JSON API over the checkpoint tables.
// Hono (web-standard Request/Response, small, SSE helper built in) on @hono/node-server.
// createMissionControl builds the app without listening, so tests run it in-process on port 0.
import { randomBytes } from 'node:crypto';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import type { Database } from '../store/connection.ts';
import { PROJECT_ROOT, type Config } from '../core/config.ts';
import type { JobQueue } from '../worker/queue/types.ts';
import { createLogger, type Logger } from '../worker/log.ts';
import type { McEnv } from './context.ts';
import { sendPage } from './layout.ts';
import { messageContent } from './pages-admin.ts';
import { mountActionRoutes } from './routes-actions.ts';
import { mountAdminRoutes } from './routes-admin.ts';
import { mountFleetStorageRoutes } from './routes-fleet-storage.ts';
import { mountSettingsRoutes } from './routes-settings.ts';
import { mountStorageRoutes } from './routes-storage.ts';
import { mountAgUiRoutes } from './routes-ag-ui.ts';
import { mountWorkspaceRoutes } from './routes-workspace.ts';
import { mountMetricsRoute } from './routes-metrics.ts';
import { ChangeHub } from './sse-hub.ts';
import { isDatabaseUnreachable } from '../store/transient-retry.ts';
import { outageGate } from './unavailable.ts';

/** Every request body (sign-in form, action JSON) is small: more is refused before it is read. */
export const MAX_BODY_BYTES = 64 * 1024;

export interface MissionControlOptions {
  db: Database;
  /** The full config enables the operator actions (routes-actions.ts); these two are the minimum. */
  config: Pick<Config, 'MISSION_CONTROL_PORT' | 'LOG_LEVEL'> & Partial<Config>;
  logger?: Logger;
  /** Where forks and retries are enqueued; default: the queue the config names. */
  queue?: JobQueue;
}

export interface RunningMissionControl {
  port: number;
  url: string;
  close(): Promise<void>;
}

export interface MissionControl {
  app: Hono<McEnv>;
  hub: ChangeHub;
  /** Listens on 127.0.0.1 (port 0: any free port) after the LISTEN for changes is in place. */
  start(port?: number): Promise<RunningMissionControl>;
}

export function createMissionControl({ db, config, logger, queue }: MissionControlOptions): MissionControl {
  const log = logger ?? createLogger({ name: 'mission-control', level: config.LOG_LEVEL });
  const hub = new ChangeHub();
  const app = new Hono<McEnv>();
  const outage = outageGate(log);

  app.use('*', async (c, next) => {
    // A cross-site form post (sign-in CSRF) carries a foreign Origin; the browser sets it, a page cannot.
    const origin = c.req.header('origin');
    if (c.req.method === 'POST' && origin && origin !== new URL(c.req.url).origin) {
      return c.json({ error: 'forbidden', message: 'cross-origin request refused' }, 403);
    }
    c.set('nonce', randomBytes(16).toString('base64'));
    await next();
    c.header('Cache-Control', 'no-store');
    c.header('X-Content-Type-Options', 'nosniff');
    // same-origin, not no-referrer: under no-referrer a browser posts the sign-in form with `Origin: null`.
    c.header('Referrer-Policy', 'same-origin');
    c.header('X-Frame-Options', 'DENY');
  });

  // Content-Length over the limit is refused at once; a chunked body is counted as it streams.
  // The connection is closed rather than drained, so a 150 MB upload is not read to its end.
  app.use(
    '*',
    bodyLimit({
      maxSize: MAX_BODY_BYTES,
      onError: (c) => {
        c.header('Connection', 'close');
        return c.json(
          { error: 'payload_too_large', message: `request bodies are limited to ${MAX_BODY_BYTES} bytes` },
          413,
        );
      },
    }),
  );

  app.use('*', outage.watch);
  app.get('/favicon.ico', (c) => c.body(null, 204));
  mountMetricsRoute(app, { db, token: config.MISSION_CONTROL_METRICS_TOKEN });
  mountAdminRoutes(app, db, hub);
  mountFleetStorageRoutes(app, db);
  mountWorkspaceRoutes(app, db, hub);
  const actions = mountActionRoutes(app, {
    db,
    config: config.WORKER_REPO_ROOT ? (config as Config) : undefined,
    queue,
    log,
  });
  mountSettingsRoutes(app, { db, config });
  mountStorageRoutes(app, {
    db,
    repoRoot: config.WORKER_REPO_ROOT,
    // Prune now applies the policy as the stall detector's sweep does (its notes and remote refs too).
    sweep: {
      log,
      repoRoot: config.WORKER_REPO_ROOT ?? PROJECT_ROOT,
      notesRef: config.WORKER_NOTES_REF ?? 'refs/notes/echodo-checkpoints',
      remote: config.WORKER_CHECKPOINT_REMOTE,
    },
  });
  const agUi = mountAgUiRoutes(app, { db, config, queue, log });

  const wantsJson = (path: string) => path.startsWith('/api/');
  app.notFound((c) =>
    wantsJson(c.req.path)
      ? c.json({ error: 'not_found', message: 'no such endpoint' }, 404)
      : sendPage(c, { title: 'Not found', content: messageContent('Not found', 'There is no page here.') }, 404),
  );
  app.onError((err, c) => {
    if (isDatabaseUnreachable(err)) return outage.respond(c, wantsJson(c.req.path), err);
    log.error({ err, method: c.req.method, path: c.req.path }, 'mission control request failed');
    return wantsJson(c.req.path)
      ? c.json({ error: 'internal', message: 'internal error' }, 500)
      : sendPage(c, { title: 'Error', content: messageContent('Something went wrong', 'The error was logged.') }, 500);
  });

  return {
    app,
    hub,
    async start(port = config.MISSION_CONTROL_PORT) {
      await hub.start(db.admin);
      let server: Server;
      try {
        server = await new Promise<Server>((resolve, reject) => {
          const s = serve({ fetch: app.fetch, port, hostname: '127.0.0.1' }, () => resolve(s as Server)) as Server;
          s.once('error', reject);
        });
      } catch (err) {
        await hub.close();
        throw err;
      }
      const actual = (server.address() as AddressInfo).port;
      log.info({ url: `http://127.0.0.1:${actual}` }, 'mission control listening');
      return {
        port: actual,
        url: `http://127.0.0.1:${actual}`,
        async close() {
          await hub.close(); // ends every SSE stream, so the server can finish closing
          await actions.close();
          await agUi.close();
          await new Promise<void>((resolve) => {
            server.close(() => resolve());
            server.closeIdleConnections();
            // A client still mid-request gets a moment, then its connection is cut.
            setTimeout(() => server.closeAllConnections(), 1000).unref();
          });
        },
      };
    },
  };
}
