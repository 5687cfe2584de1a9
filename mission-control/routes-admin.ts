// Sign-in and out, and the admin fleet rollup (page, JSON, live feed of every workspace).
import type { Hono } from 'hono';
import type { Sql } from 'postgres';
import type { Database } from '../store/connection.ts';
import { fleetSpendToday } from '../store/fleet-metrics.ts';
import { fleetSummary } from '../store/mission-control.ts';
import { lookupToken } from '../store/tokens.ts';
import { clearSessionCookie, requirePrincipal, safeReturnPath, setSessionCookie } from './auth.ts';
import type { McEnv } from './context.ts';
import { changeFeed } from './feed.ts';
import { sendPage } from './layout.ts';
import { fleetContent, loginContent, messageContent, type FleetRow } from './pages-admin.ts';
import type { ChangeHub } from './sse-hub.ts';

/** The guards of an admin-only view: JSON 403 for the API, a Forbidden page naming `what` for HTML. */
export function adminOnly(db: Database, what: string) {
  const forbiddenPage = (c: Parameters<typeof sendPage>[0]) =>
    sendPage(c, { title: 'Forbidden', content: messageContent('Forbidden', `${what} needs an admin token.`) }, 403);
  return {
    api: requirePrincipal(db.admin, { surface: 'api', need: 'admin' }),
    pages: requirePrincipal(db.admin, { surface: 'html', need: 'admin', forbiddenPage }),
  };
}

/** Each workspace of the fleet with its spend today (UTC), for the fleet page and GET /api/fleet alike. */
async function fleetToday(admin: Sql): Promise<FleetRow[]> {
  const [workspaces, spend] = await Promise.all([fleetSummary(admin), fleetSpendToday(admin)]);
  const spendOf = new Map(spend.map((s) => [s.workspace_id, s]));
  return workspaces.map((w) => ({ ...w, spend: spendOf.get(w.workspaceId) }));
}

export function mountAdminRoutes(app: Hono<McEnv>, db: Database, hub: ChangeHub): void {
  app.get('/login', (c) =>
    sendPage(c, { title: 'Sign in', content: loginContent(undefined, safeReturnPath(c.req.query('next'))) }),
  );

  app.post('/login', async (c) => {
    const form = await c.req.parseBody().catch(() => ({}) as Record<string, unknown>);
    const token = typeof form.token === 'string' ? form.token.trim() : '';
    const principal = await lookupToken(db.admin, token);
    const next = safeReturnPath(form.next);
    if (!principal)
      return sendPage(c, { title: 'Sign in', content: loginContent('That token is not valid.', next) }, 401);
    setSessionCookie(c, token, principal.expiresAt);
    return c.redirect(principal.kind === 'admin' ? '/fleet' : (next ?? '/'), 303);
  });

  app.post('/logout', (c) => {
    clearSessionCookie(c);
    return c.redirect('/login', 303);
  });

  const { api, pages } = adminOnly(db, 'The fleet view');

  app.get('/api/fleet', api, async (c) => {
    return c.json({
      workspaces: (await fleetToday(db.admin)).map(({ spend: s, ...w }) => {
        // Today (UTC): tokens, the priced cost and the records without a price, the cap, runs a budget stopped.
        const today = s && {
          tokens: s.tokens,
          pricedUsd: s.cost_usd,
          unpriced: s.unpriced,
          dailyCapUsd: s.daily_usd,
          budgetExhausted: s.budget_exhausted,
        };
        return { ...w, today: today ?? null };
      }),
    });
  });
  app.get('/api/fleet/events', api, (c) => changeFeed(c, hub, null));
  app.get('/fleet', pages, async (c) =>
    sendPage(c, {
      title: 'Fleet',
      who: 'admin',
      live: { events: '/api/fleet/events' },
      content: fleetContent(await fleetToday(db.admin)),
    }),
  );
}
