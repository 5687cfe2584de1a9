// A workspace's pages and JSON API. Every read goes through withWorkspace on the app
// connection, so row-level security decides what exists: another workspace's convoy or run
// is simply not found, with the same 404 body as an id that never existed.
import type { Hono } from 'hono';
import type { Database } from '../store/connection.ts';
import { convoyDetail, listConvoys, runHistory } from '../store/mission-control.ts';
import { withWorkspace, type WorkspaceTx } from '../store/workspace.ts';
import { convoyJson, convoysJson, runCheckpointsJson } from './api-json.ts';
import { requirePrincipal, workspaceOf } from './auth.ts';
import type { McContext, McEnv } from './context.ts';
import { changeFeed } from './feed.ts';
import { sendPage } from './layout.ts';
import { messageContent } from './pages-admin.ts';
import { convoyDetailContent, convoyListContent, runTimelineContent } from './pages-workspace.ts';
import { isReadOnly, pageCsrfToken } from './routes-actions.ts';
import type { ChangeHub } from './sse-hub.ts';

const NOT_FOUND = {
  convoy: { error: 'not_found', message: 'convoy not found' },
  run: { error: 'not_found', message: 'run not found' },
} as const;

/** The panel's forms carry the session's CSRF token; a read-only token (or a bearer page) gets none. */
function actionView(c: McContext): { csrf: string } | undefined {
  const csrf = pageCsrfToken(c);
  return csrf && !isReadOnly(c.get('principal')) ? { csrf } : undefined;
}

export function mountWorkspaceRoutes(app: Hono<McEnv>, db: Database, hub: ChangeHub): void {
  const api = requirePrincipal(db.admin, { surface: 'api', need: 'workspace' });
  const pages = requirePrincipal(db.admin, { surface: 'html', need: 'workspace' });
  const read = <T>(c: McContext, fn: (tx: WorkspaceTx) => Promise<T>) => withWorkspace(db.app, workspaceOf(c), fn);
  const who = (c: McContext) => `workspace ${workspaceOf(c)}`;
  const enc = encodeURIComponent;

  // ------------------------------------------------------------------ JSON
  app.get('/api/convoys', api, async (c) => c.json(convoysJson(await read(c, (tx) => listConvoys(tx)))));

  app.get('/api/convoys/:convoyId', api, async (c) => {
    const convoy = await read(c, (tx) => convoyDetail(tx, c.req.param('convoyId')));
    return convoy ? c.json(convoyJson(convoy)) : c.json(NOT_FOUND.convoy, 404);
  });

  app.get('/api/runs/:agentRunId/checkpoints', api, async (c) => {
    const history = await read(c, (tx) => runHistory(tx, c.req.param('agentRunId')));
    return history ? c.json(runCheckpointsJson(history)) : c.json(NOT_FOUND.run, 404);
  });

  app.get('/api/events', api, (c) => changeFeed(c, hub, workspaceOf(c)));

  // ------------------------------------------------------------------ pages
  app.get('/', pages, async (c) => {
    const convoys = await read(c, (tx) => listConvoys(tx));
    return sendPage(c, { title: 'Convoys', who: who(c), live: { events: '/api/events' }, content: convoyListContent(convoys) });
  });

  app.get('/convoys/:convoyId', pages, async (c) => {
    const convoy = await read(c, (tx) => convoyDetail(tx, c.req.param('convoyId')));
    if (!convoy) return sendPage(c, { title: 'Not found', who: who(c), content: messageContent('Not found', NOT_FOUND.convoy.message) }, 404);
    return sendPage(c, {
      title: convoy.convoyId,
      who: who(c),
      live: { events: '/api/events', json: `/api/convoys/${enc(convoy.convoyId)}`, convoy: convoy.convoyId },
      content: convoyDetailContent(convoy),
    });
  });

  app.get('/runs/:agentRunId', pages, async (c) => {
    const history = await read(c, (tx) => runHistory(tx, c.req.param('agentRunId')));
    if (!history) return sendPage(c, { title: 'Not found', who: who(c), content: messageContent('Not found', NOT_FOUND.run.message) }, 404);
    return sendPage(c, {
      title: `run ${history.run.agentRunId}`,
      who: who(c),
      live: { events: '/api/events', run: history.run.agentRunId },
      content: runTimelineContent(history, actionView(c)),
    });
  });
}
