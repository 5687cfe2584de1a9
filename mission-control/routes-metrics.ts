// GET /metrics: Prometheus text for the fleet (runs by status, queue depth and the age of the oldest
// queued job, stall re-dispatches, tokens and cost by workspace and model), computed from Postgres at each scrape. Mission control
// listens on 127.0.0.1, so a remote client reaches it only through a proxy: without
// MISSION_CONTROL_METRICS_TOKEN a scrape is served only to a loopback peer that no proxy forwarded
// (no Forwarded / X-Forwarded-For); with it, only to a bearer of that token.
import { timingSafeEqual } from 'node:crypto';
import type { Hono } from 'hono';
import { Counter, Gauge, Registry } from 'prom-client';
import type { Database } from '../store/connection.ts';
import { fleetCost, fleetQueue, fleetRunCounts, fleetStallSweeps, fleetTokens } from '../store/fleet-metrics.ts';
import { modelLabel } from '../worker/metrics.ts';
import type { McEnv } from './context.ts';

const LOOPBACK = new Set(['127.0.0.1', '::1', '::ffff:127.0.0.1']);

function tokenMatches(header: string | undefined, token: string): boolean {
  const given = Buffer.from(header?.startsWith('Bearer ') ? header.slice(7) : '');
  const wanted = Buffer.from(token);
  return given.length === wanted.length && timingSafeEqual(given, wanted);
}

/** The registry of one scrape: gauges set from the aggregates, so nothing can drift between scrapes. */
async function scrape(db: Database): Promise<Registry> {
  const registry = new Registry();
  const runs = new Gauge({
    name: 'echodo_runs',
    help: 'Runs by workspace and status',
    labelNames: ['workspace', 'status'],
    registers: [registry],
  });
  const depth = new Gauge({ name: 'echodo_queue_depth', help: 'Runs queued', registers: [registry] });
  const age = new Gauge({
    name: 'echodo_queue_oldest_age_seconds',
    help: 'Age of the oldest queued run',
    registers: [registry],
  });
  const tokens = new Gauge({
    name: 'echodo_tokens',
    help: 'Tokens recorded (checkpoint rows and final answers), by kind',
    labelNames: ['workspace', 'model', 'kind'],
    registers: [registry],
  });
  const cost = new Gauge({
    name: 'echodo_cost_usd',
    help: 'Priced cost of the usage records (USD)',
    labelNames: ['workspace', 'model'],
    registers: [registry],
  });
  const unpriced = new Gauge({
    name: 'echodo_unpriced_checkpoints',
    help: 'Usage records (checkpoint rows and final answers) without a price or usage',
    labelNames: ['workspace', 'model'],
    registers: [registry],
  });
  // Counted from the events the stall detector records (it is a process of its own).
  const sweeps = new Counter({
    name: 'echodo_stall_redispatches_total',
    help: 'Runs the stall detector re-dispatched (kind "redispatched": a lease expired) or re-enqueued (queued too long)',
    labelNames: ['workspace', 'kind'],
    registers: [registry],
  });
  const [counts, queue, usage, costs, stalls] = await Promise.all([
    fleetRunCounts(db.app),
    fleetQueue(db.app),
    fleetTokens(db.app),
    fleetCost(db.app),
    fleetStallSweeps(db.app),
  ]);
  for (const r of stalls) sweeps.inc({ workspace: r.workspace_id, kind: r.kind }, r.runs);
  for (const r of costs) {
    const labels = { workspace: r.workspace_id, model: modelLabel(r.model_id) };
    cost.inc(labels, r.cost_usd);
    unpriced.inc(labels, r.unpriced);
  }
  for (const r of counts) runs.set({ workspace: r.workspace_id, status: r.status }, r.runs);
  depth.set(queue.depth);
  age.set(queue.oldest_age_s);
  for (const t of usage) {
    const labels = { workspace: t.workspace_id, model: modelLabel(t.model_id) };
    const kinds = {
      input: t.input,
      output: t.output,
      cache_read: t.cache_read,
      cache_write: t.cache_write,
      reasoning: t.reasoning,
    };
    for (const [kind, n] of Object.entries(kinds)) if (n !== null) tokens.inc({ ...labels, kind }, n);
  }
  return registry;
}

export function mountMetricsRoute(app: Hono<McEnv>, deps: { db: Database; token?: string }): void {
  app.get('/metrics', async (c) => {
    if (deps.token) {
      if (!tokenMatches(c.req.header('authorization'), deps.token)) return c.text('metrics token required\n', 401);
    } else {
      const peer = (c.env as { incoming?: { socket?: { remoteAddress?: string } } } | undefined)?.incoming?.socket
        ?.remoteAddress;
      const proxied = c.req.header('x-forwarded-for') !== undefined || c.req.header('forwarded') !== undefined;
      if (!peer || !LOOPBACK.has(peer) || proxied) {
        return c.text(
          'metrics are served to loopback only (set MISSION_CONTROL_METRICS_TOKEN for remote scrapes)\n',
          403,
        );
      }
    }
    const registry = await scrape(deps.db);
    return c.body(await registry.metrics(), 200, { 'content-type': registry.contentType });
  });
}
