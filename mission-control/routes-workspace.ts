// A workspace's pages and JSON API. Every read goes through withWorkspace on the app
// connection, so row-level security decides what exists: another workspace's convoy or run
// is simply not found, with the same 404 body as an id that never existed.
import type { Hono } from 'hono';
import type { Database } from '../store/connection.ts';
import { convoyDetail, listConvoys } from '../store/mission-control.ts';
import { chainPage, chainVerdict, type ChainVerdict } from '../store/chain-verdict.ts';
import { MAX_PAGE, searchRuns } from '../store/run-search.ts';
import { checkpointPage, checkpointTime, runEventsBetween, runOverview } from '../store/run-timeline.ts';
import { withWorkspace, type WorkspaceTx } from '../store/workspace.ts';
import { checkpointPageJson, convoyJson, convoysJson, runOverviewJson, runPageJson } from './api-json.ts';
import { requirePrincipal, workspaceOf } from './auth.ts';
import type { McContext, McEnv } from './context.ts';
import { changeFeed } from './feed.ts';
import { sendPage } from './layout.ts';
import { messageContent } from './pages-admin.ts';
import { runListContent } from './pages-runs.ts';
import { convoyDetailContent, convoyListContent, runTimelineContent, type RunPageView } from './pages-workspace.ts';
import { parseConvoyQuery, parseRunQuery, parseSeqCursor } from './run-query.ts';
import {
  checkpointCosts,
  convoyCost,
  finalAnswerCost,
  runCost,
  workspaceDayCost,
  type CostTotal,
} from '../store/cost.ts';
import { dailyBudget } from '../store/budget.ts';
import { convoyUsageContent, runUsageContent, spendTodayContent } from './pages-usage.ts';
import { html } from './html.ts';
import { isReadOnly, pageCsrfToken } from './routes-actions.ts';
import type { ChangeHub } from './sse-hub.ts';
import { docReview } from '../store/doc-review.ts';
import { endsInReview, FILES_IN_EVENT } from '../worker/run/doc-review.ts';
import { docReviewContent } from './pages-doc-review.ts';

const NOT_FOUND = {
  convoy: { error: 'not_found', message: 'convoy not found' },
  run: { error: 'not_found', message: 'run not found' },
} as const;

/** The panel's forms carry the session's CSRF token; a read-only token (or a bearer page) gets none. */
function actionView(c: McContext): { csrf: string } | undefined {
  const csrf = pageCsrfToken(c);
  return csrf && !isReadOnly(c.get('principal')) ? { csrf } : undefined;
}

const badLimit = { error: 'bad_request', message: `limit must be an integer from 1 to ${MAX_PAGE}` };
const TIMELINE_PAGE = 50;

/**
 * One page of a run's timeline, for the run page and GET /api/runs/:id/checkpoints alike: the run, its chain
 * verdict, the checkpoints older than `before` that `readPage` reads (newest first) and the events among them,
 * from the page's oldest checkpoint (all before it when it is the first) up to checkpoint `before`. Undefined
 * when the run does not exist in this workspace.
 */
async function timelinePage<P extends { older: number | null }>(
  tx: WorkspaceTx,
  agentRunId: string,
  before: number | null,
  readPage: (verdict: ChainVerdict) => Promise<P>,
  oldestAt: (page: P) => Date | undefined,
) {
  const run = await runOverview(tx, agentRunId);
  if (!run) return undefined;
  const verdict = await chainVerdict(tx, agentRunId);
  const page = await readPage(verdict);
  const from = page.older !== null ? (oldestAt(page) ?? null) : null;
  const to = before !== null ? await checkpointTime(tx, agentRunId, before) : null;
  return { run, verdict, page, before, events: await runEventsBetween(tx, agentRunId, from, to) };
}

/** The run page's view: a page of its checkpoints with their tool calls. */
function runPageView(tx: WorkspaceTx, agentRunId: string, before: number | null): Promise<RunPageView | undefined> {
  const readPage = () => checkpointPage(tx, agentRunId, before, TIMELINE_PAGE);
  return timelinePage(tx, agentRunId, before, readPage, (page) => page.checkpoints.at(-1)?.occurredAt);
}

/** A page of GET /api/runs/:id/checkpoints: its own rows hashed again, checked against the verdict. */
function checkpointsPage(tx: WorkspaceTx, agentRunId: string, before: number | null, limit: number) {
  const readPage = (verdict: ChainVerdict) => chainPage(tx, agentRunId, verdict, before, limit);
  return timelinePage(tx, agentRunId, before, readPage, (page) => page.rows.at(-1)?.occurred_at);
}

/** A doc-writer run's brief and files; undefined for any other run. */
function docReviewOf(tx: WorkspaceTx, run: { agentRunId: string; harnessAlias: string | null }) {
  return endsInReview({ alias: run.harnessAlias ?? '' }) ? docReview(tx, run.agentRunId, FILES_IN_EVENT) : undefined;
}

/** A run's usage totals and cost for GET /api/runs/:id; costUsd null when any checkpoint is unpriced. */
function usageJson(cost: CostTotal) {
  const { inputTokens, outputTokens, cacheReadTokens, cacheWriteTokens, reasoningTokens } = cost;
  return {
    usage: { inputTokens, outputTokens, cacheReadTokens, cacheWriteTokens, reasoningTokens },
    costUsd: cost.costUsd,
    unpricedCheckpoints: cost.unpricedCheckpoints,
  };
}

export function mountWorkspaceRoutes(app: Hono<McEnv>, db: Database, hub: ChangeHub): void {
  const api = requirePrincipal(db.admin, { surface: 'api', need: 'workspace' });
  const pages = requirePrincipal(db.admin, { surface: 'html', need: 'workspace' });
  const read = <T>(c: McContext, fn: (tx: WorkspaceTx) => Promise<T>) => withWorkspace(db.app, workspaceOf(c), fn);
  const who = (c: McContext) => `workspace ${workspaceOf(c)}`;
  const enc = encodeURIComponent;

  // ------------------------------------------------------------------ JSON
  app.get('/api/convoys', api, async (c) => {
    const parsed = parseConvoyQuery((name) => c.req.query(name));
    if (!parsed.ok) return c.json({ error: 'bad_request', message: parsed.message }, 400);
    const { filter, cursor, limit } = parsed.query;
    return c.json(convoysJson(await read(c, (tx) => listConvoys(tx, cursor, limit, filter))));
  });

  app.get('/api/runs', api, async (c) => {
    const parsed = parseRunQuery((name) => c.req.query(name));
    if (!parsed.ok) return c.json({ error: 'bad_request', message: parsed.message }, 400);
    const { filter, cursor, limit } = parsed.query;
    return c.json(runPageJson(await read(c, (tx) => searchRuns(tx, filter, cursor, limit))));
  });

  app.get('/api/runs/:agentRunId', api, async (c) => {
    const found = await read(c, async (tx) => {
      const run = await runOverview(tx, c.req.param('agentRunId'));
      if (!run) return undefined;
      const verdict = await chainVerdict(tx, run.agentRunId);
      return { run, verdict, cost: await runCost(tx, run.agentRunId), review: await docReviewOf(tx, run) };
    });
    if (!found) return c.json(NOT_FOUND.run, 404);
    const { review } = found;
    const docReviewJson = review && {
      briefStatus: review.brief.status,
      publishedAt: review.brief.publishedAt?.toISOString() ?? null,
      publishedBy: review.brief.publishedBy,
      fileCount: review.total,
      files: review.files,
    };
    return c.json({
      ...runOverviewJson(found.run, found.verdict),
      ...usageJson(found.cost),
      docReview: docReviewJson ?? null,
    });
  });

  app.get('/api/convoys/:convoyId', api, async (c) => {
    const found = await read(c, async (tx) => {
      const convoy = await convoyDetail(tx, c.req.param('convoyId'));
      return convoy && { convoy, cost: await convoyCost(tx, convoy.convoyId) };
    });
    return found ? c.json({ ...convoyJson(found.convoy), ...usageJson(found.cost) }) : c.json(NOT_FOUND.convoy, 404);
  });

  // Newest first, a page at a time; the chain verdict is the stored one, carried forward over the
  // rows written since, and the page's own rows are hashed again.
  app.get('/api/runs/:agentRunId/checkpoints', api, async (c) => {
    const limit = Number(c.req.query('limit') ?? TIMELINE_PAGE);
    if (!Number.isInteger(limit) || limit < 1 || limit > MAX_PAGE) return c.json(badLimit, 400);
    const cursor = parseSeqCursor(c.req.query('cursor'));
    if (!cursor.ok) {
      return c.json({ error: 'bad_request', message: 'cursor must be the cursor of the page before' }, 400);
    }
    const found = await read(c, (tx) => checkpointsPage(tx, c.req.param('agentRunId'), cursor.before, limit));
    if (!found) return c.json(NOT_FOUND.run, 404);
    return c.json(checkpointPageJson(found.run, found.verdict, found.page, found.events));
  });

  app.get('/api/events', api, (c) => changeFeed(c, hub, workspaceOf(c)));

  // ------------------------------------------------------------------ pages
  app.get('/', pages, async (c) => {
    const parsed = parseConvoyQuery((name) => c.req.query(name));
    const query = parsed.ok ? parsed.query : { filter: {}, cursor: null, limit: 50 };
    const [page, today, cap] = await read(c, (tx) =>
      Promise.all([listConvoys(tx, query.cursor, query.limit, query.filter), workspaceDayCost(tx), dailyBudget(tx)]),
    );
    const error = parsed.ok ? undefined : parsed.message;
    const content = html`${spendTodayContent(today, cap)}${convoyListContent(page, query.cursor, query.filter, error)}`;
    return sendPage(c, { title: 'Convoys', who: who(c), live: { events: '/api/events' }, content }, error ? 400 : 200);
  });

  app.get('/runs', pages, async (c) => {
    const parsed = parseRunQuery((name) => c.req.query(name));
    const query = parsed.ok ? parsed.query : { filter: {}, cursor: null, limit: 50 };
    const page = await read(c, (tx) => searchRuns(tx, query.filter, query.cursor, query.limit));
    const content = runListContent(page, query.filter, query.cursor, parsed.ok ? undefined : parsed.message);
    return sendPage(c, { title: 'Runs', who: who(c), live: { events: '/api/events' }, content }, parsed.ok ? 200 : 400);
  });

  app.get('/convoys/:convoyId', pages, async (c) => {
    const found = await read(c, async (tx) => {
      const detail = await convoyDetail(tx, c.req.param('convoyId'));
      return detail && { detail, cost: await convoyCost(tx, detail.convoyId) };
    });
    if (!found)
      return sendPage(
        c,
        { title: 'Not found', who: who(c), content: messageContent('Not found', NOT_FOUND.convoy.message) },
        404,
      );
    const convoy = found.detail;
    return sendPage(c, {
      title: convoy.convoyId,
      who: who(c),
      live: { events: '/api/events', json: `/api/convoys/${enc(convoy.convoyId)}`, convoy: convoy.convoyId },
      content: html`${convoyDetailContent(convoy)}${convoyUsageContent(found.cost)}`,
    });
  });

  app.get('/runs/:agentRunId', pages, async (c) => {
    const cursor = parseSeqCursor(c.req.query('before'));
    const before = cursor.ok ? cursor.before : null;
    const view = await read(c, async (tx) => {
      const found = await runPageView(tx, c.req.param('agentRunId'), before);
      const review = found && (await docReviewOf(tx, found.run));
      return found && review
        ? { ...found, review: docReviewContent(found.run.agentRunId, review, actionView(c)) }
        : found;
    });
    if (!view)
      return sendPage(
        c,
        { title: 'Not found', who: who(c), content: messageContent('Not found', NOT_FOUND.run.message) },
        404,
      );
    const seqs = view.page.checkpoints.map((cp) => cp.seq);
    // The costs of the checkpoints this page shows, not of the whole run.
    const shown = seqs.length ? { from: Math.min(...seqs), to: Math.max(...seqs) } : { from: 1, to: 0 };
    const [total, costs, final] = await read(c, (tx) =>
      Promise.all([
        runCost(tx, view.run.agentRunId),
        checkpointCosts(tx, view.run.agentRunId, shown),
        finalAnswerCost(tx, view.run.agentRunId),
      ]),
    );
    return sendPage(c, {
      title: `run ${view.run.agentRunId}`,
      who: who(c),
      live: { events: '/api/events', run: view.run.agentRunId },
      content: html`${runTimelineContent(view, actionView(c))}${runUsageContent(total, costs.reverse(), final)}`,
    });
  });
}
