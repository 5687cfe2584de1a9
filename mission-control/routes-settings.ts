// Settings of the token's workspace: GET /settings (the page), its form POSTs, and the JSON
// GET /api/settings and POST /api/models/:alias/test. Writes follow routes-actions.ts: a
// read-only token gets 403; a cookie POST needs the CSRF token and the same origin. Keys are
// named, never read into a page or an answer; a Test's error is redacted.
import type { Hono } from 'hono';
import type { Database } from '../store/connection.ts';
import { harnessOverride, modelProvider, upsertModelProvider } from '../store/settings-lookup.ts';
import { keyGrantOf } from '../store/grants.ts';
import {
  listHarnesses,
  listModelProviders,
  listRoutes,
  removeHarness,
  removeModelProvider,
  removeRoute,
  upsertHarness,
  upsertRoute,
} from '../store/settings-edit.ts';
import { withWorkspace, type WorkspaceTx } from '../store/workspace.ts';
import { redactString, registerSecretsFromEnv } from '../core/redact.ts';
import type { Config } from '../core/config.ts';
import { EchodoError } from '../core/errors.ts';
import { parseKeyVarGlobs } from '../core/key-vars.ts';
import {
  harnessInput,
  modelInput,
  routeInput,
  testHarness,
  testModelProvider,
  type HarnessTestResult,
  type ModelTestResult,
} from '../operator/settings.ts';
import { requirePrincipal, workspaceOf } from './auth.ts';
import { builtinHarnesses } from '../worker/run/harnesses.ts';
import { isConfirmed, sendConfirmation } from './confirm.ts';
import type { McContext, McEnv } from './context.ts';
import { sendPage } from './layout.ts';
import { isReadOnly, mayWrite, pageCsrfToken } from './routes-actions.ts';
import { settingsContent, type SettingsView } from './pages-settings.ts';
import { listPrices, removePrice, setDailyBudget, setPrice, workspaceDayCost } from '../store/cost.ts';
import { dailyBudget } from '../store/budget.ts';
import { priceInput, requiredAmount } from '../operator/price-input.ts';
import { setQuota, setRetention, storagePolicy } from '../store/storage.ts';
import { storagePolicyInput } from './storage-policy-form.ts';

const lines = (v: unknown) =>
  typeof v === 'string'
    ? v
        .split(/[\n;]/)
        .map((x) => x.trim())
        .filter(Boolean)
    : [];
const str = (v: unknown) => (typeof v === 'string' ? v : undefined);

export function mountSettingsRoutes(app: Hono<McEnv>, deps: { db: Database; config?: Partial<Config> }): void {
  const { db } = deps;
  const api = requirePrincipal(db.admin, { surface: 'api', need: 'workspace' });
  const pages = requirePrincipal(db.admin, { surface: 'html', need: 'workspace' });
  const globs = () => parseKeyVarGlobs(deps.config?.WORKER_PROVIDER_KEY_VARS);
  const inWs = <T>(c: McContext, fn: (tx: WorkspaceTx) => Promise<T>) => withWorkspace(db.app, workspaceOf(c), fn);
  const load = (c: McContext) =>
    inWs(c, async (tx) => ({
      models: await listModelProviders(tx),
      harnesses: await listHarnesses(tx),
      routes: await listRoutes(tx),
      prices: await listPrices(tx),
      dailyCapUsd: await dailyBudget(tx),
    }));
  /** What only the page shows: today's spend against the cap, and the storage policy. */
  const loadPage = (c: McContext) =>
    inWs(c, async (tx) => ({
      ...(await load(c)),
      spentTodayUsd: (await workspaceDayCost(tx)).pricedUsd,
      storage: await storagePolicy(tx),
    }));
  const view = (c: McContext) => {
    const csrf = pageCsrfToken(c);
    return csrf && !isReadOnly(c.get('principal')) ? { csrf } : undefined;
  };
  const render = async (c: McContext, notice?: SettingsView['notice'], status: 200 | 400 | 404 = 200) =>
    sendPage(
      c,
      {
        title: 'Settings',
        who: `workspace ${workspaceOf(c)}`,
        content: settingsContent(
          { ...(await loadPage(c)), builtins: Object.values(builtinHarnesses(deps.config ?? {})), notice },
          view(c),
        ),
      },
      status,
    );

  /** The Test: the row is read in a transaction, the call is made after it (no connection waits on the network). */
  async function test(c: McContext, alias: string): Promise<ModelTestResult | undefined> {
    const found = await inWs(c, async (tx) => {
      const row = await modelProvider(tx, alias);
      return row && { row, keyGrant: row.api_key_env_var ? await keyGrantOf(tx, row.api_key_env_var) : undefined };
    });
    if (!found) return undefined;
    const { row, keyGrant } = found;
    registerSecretsFromEnv(process.env, row.api_key_env_var ? [row.api_key_env_var] : []);
    return testModelProvider(row, { keyVarGlobs: globs(), keyGrant });
  }

  /** A harness's Test: a remote adapter's probe run, made after the transaction too. */
  async function testHarnessOf(c: McContext, alias: string): Promise<HarnessTestResult | undefined> {
    const found = await inWs(c, async (tx) => {
      const row = await harnessOverride(tx, alias);
      return row && { row, keyGrant: row.key_env_var ? await keyGrantOf(tx, row.key_env_var) : undefined };
    });
    if (!found) {
      // A built-in is the worker's own loop: nothing remote to probe (as `harness test` answers).
      const builtin = builtinHarnesses(deps.config ?? {})[alias];
      return builtin && { ok: true, latencyMs: 0, events: 0, adapter: builtin.adapter };
    }
    const { row, keyGrant } = found;
    registerSecretsFromEnv(process.env, row.key_env_var ? [row.key_env_var] : []);
    return testHarness(row, { keyVarGlobs: globs(), keyGrant });
  }

  // ------------------------------------------------------------------ JSON
  app.get('/api/settings', api, async (c) => {
    const s = await load(c);
    return c.json({
      models: s.models.map((m) => ({
        alias: m.alias,
        provider: m.provider,
        baseUrl: m.base_url && redactString(m.base_url),
        model: m.model,
        keyEnv: m.api_key_env_var,
      })),
      harnesses: s.harnesses.map((h) => ({
        alias: h.alias,
        adapter: h.adapter,
        url: h.endpoint_url && redactString(h.endpoint_url),
        keyEnv: h.key_env_var,
        worktree: h.needs_worktree,
        allow: h.allowed_commands,
        writePrefixes: h.write_prefixes,
      })),
      routes: s.routes.map((r) => ({ role: r.role_id, harness: r.harness_alias })),
      prices: s.prices,
      dailyCapUsd: s.dailyCapUsd,
    });
  });

  app.post('/api/models/:alias/test', api, mayWrite('api'), async (c) => {
    const result = await test(c, c.req.param('alias'));
    return result
      ? c.json({ alias: c.req.param('alias'), ...result })
      : c.json({ error: 'not_found', message: 'model not found' }, 404);
  });

  app.post('/api/harnesses/:alias/test', api, mayWrite('api'), async (c) => {
    const result = await testHarnessOf(c, c.req.param('alias'));
    return result
      ? c.json({ alias: c.req.param('alias'), ...result })
      : c.json({ error: 'not_found', message: 'harness not found' }, 404);
  });

  // ------------------------------------------------------------------ pages
  app.get('/settings', pages, (c) => render(c));

  const onPost = async (c: McContext) => {
    const { kind, name, verb } = c.req.param() as { kind: string; name?: string; verb?: string };
    const form = (await c.req.parseBody()) as Record<string, unknown>;
    try {
      if (kind === 'models' && name && verb === 'test') {
        const result = await test(c, name);
        return render(c, result ? { alias: name, test: result } : { error: `no model ${name}` }, result ? 200 : 404);
      }
      if (kind === 'harnesses' && name && verb === 'test') {
        const result = await testHarnessOf(c, name);
        return render(c, result ? { alias: name, test: result } : { error: `no harness ${name}` }, result ? 200 : 404);
      }
      if (!name) {
        if (kind === 'models') {
          const row = modelInput(
            {
              alias: str(form.alias),
              provider: str(form.provider),
              baseUrl: str(form.baseUrl),
              model: str(form.model),
              keyEnv: str(form.keyEnv),
            },
            globs(),
          );
          await inWs(c, (tx) => upsertModelProvider(tx, row, globs()));
        } else if (kind === 'harnesses') {
          const row = harnessInput(
            {
              alias: str(form.alias),
              worktree: form.worktree !== undefined,
              allow: lines(form.allow),
              writePrefix: lines(String(form.writePrefix ?? '').replaceAll(',', '\n')),
              adapter: str(form.adapter),
              url: str(form.url),
              keyEnv: str(form.keyEnv),
            },
            globs(),
          );
          await inWs(c, (tx) => upsertHarness(tx, row));
        } else if (kind === 'routes') {
          const route = routeInput({ role: str(form.role), harness: str(form.harness) });
          await inWs(c, (tx) => upsertRoute(tx, route));
        } else if (kind === 'storage') {
          const policy = storagePolicyInput(form);
          await inWs(c, async (tx) => {
            await setRetention(tx, policy.keepLast, policy.keepDays);
            await setQuota(tx, policy.quotaBytes);
          });
        } else if (kind === 'prices') {
          const price = priceInput(
            {
              model: form.model,
              input: form.input,
              output: form.output,
              cacheRead: form.cacheRead,
              cacheWrite: form.cacheWrite,
            },
            {
              model: 'Model',
              input: 'Input per million',
              output: 'Output per million',
              cacheRead: 'Cache read per million',
              cacheWrite: 'Cache write per million',
            },
          );
          await inWs(c, (tx) => setPrice(tx, price));
        } else if (kind === 'budget') {
          const daily = requiredAmount(form.dailyUsd, 'Daily cap (USD)');
          await inWs(c, (tx) => setDailyBudget(tx, daily));
        } else return render(c, { error: 'no such setting' }, 404);
      } else if (verb === 'rm') {
        if (!isConfirmed(form)) return confirmRemoval(c, kind, name);
        const removed = await inWs(c, (tx) =>
          kind === 'models'
            ? removeModelProvider(tx, name)
            : kind === 'harnesses'
              ? removeHarness(tx, name)
              : kind === 'routes'
                ? removeRoute(tx, name)
                : kind === 'prices'
                  ? removePrice(tx, name)
                  : Promise.resolve(false),
        );
        if (!removed) return render(c, { error: `nothing to remove: ${kind} ${name}` }, 404);
      } else return render(c, { error: 'no such action' }, 404);
    } catch (err) {
      if (err instanceof EchodoError) return render(c, { error: redactString(err.message) }, 400);
      throw err;
    }
    return c.redirect('/settings', 303);
  };
  const confirmRemoval = (c: McContext, kind: string, name: string) =>
    sendConfirmation(c, `workspace ${workspaceOf(c)}`, {
      title: `Remove ${kind.replace(/s$/, '')} ${name}?`,
      consequence:
        kind === 'prices'
          ? "The shipped price of that name applies again (or the model's usage reads unpriced), past checkpoints too."
          : 'Runs already started keep what they had; new runs of this workspace no longer find it.',
      action: `/settings/${encodeURIComponent(kind)}/${encodeURIComponent(name)}/rm`,
      csrf: pageCsrfToken(c) ?? '',
      back: '/settings',
      button: 'Yes, remove',
    });
  app.post('/settings/:kind', pages, mayWrite('html'), onPost);
  app.post('/settings/:kind/:name/:verb', pages, mayWrite('html'), onPost);
}
