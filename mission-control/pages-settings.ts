// The Settings page of a workspace: its model providers (each with a Test button), harnesses,
// role → harness routes, and its prices and daily cap, with forms to add and remove them. Key
// variables are shown by name only; their values are never read here. A read-only token sees the
// same tables, no forms.
import type { HarnessRow, ModelProviderRow } from '../store/settings-lookup.ts';
import type { RouteRow } from '../store/settings-edit.ts';
import { redactString } from '../core/redact.ts';
import type { HarnessTestResult, ModelTestResult } from '../operator/settings.ts';
import { html, type SafeHtml } from './html.ts';
import type { ActionView } from './pages-actions.ts';
import type { Harness } from '../worker/run/harnesses.ts';
import { SHIPPED_PRICES, SHIPPED_PRICES_AS_OF, type ModelPrice } from '../core/prices.ts';
import { formatUsd } from './pages-usage.ts';
import type { StoragePolicy } from '../store/storage.ts';
import { storagePolicySection } from './storage-policy-form.ts';

/** A form field with its own visible label: a placeholder alone disappears as soon as one types. */
function field(label: string, input: SafeHtml): SafeHtml {
  return html`<label class="field"><span>${label}</span>${input}</label>`;
}

export interface SettingsView {
  models: ModelProviderRow[];
  harnesses: HarnessRow[];
  routes: RouteRow[];
  /** The built-in harnesses: always listed, unless a row of the same alias overrides one. */
  builtins?: Harness[];
  /** The retention policy and quota, edited at the end of the page. */
  storage?: StoragePolicy;
  /** The workspace's own prices (over the shipped table), its daily cap and what it spent today (priced). */
  prices?: ModelPrice[];
  dailyCapUsd?: number | null;
  spentTodayUsd?: number;
  /** The outcome of the last Test, or a refused form, shown at the top. */
  notice?: { alias?: string; test?: ModelTestResult | HarnessTestResult; error?: string };
}

const enc = encodeURIComponent;

function post(action: string, view: ActionView, fields: SafeHtml, label: string, testid: string): SafeHtml {
  return html`<form class="action" method="post" action="${action}">
    <input type="hidden" name="_csrf" value="${view.csrf}" />${fields}<button type="submit" data-testid="${testid}">
      ${label}
    </button>
  </form>`;
}

export function testResultText(r: ModelTestResult | HarnessTestResult): string {
  if (r.ok && 'adapter' in r && r.adapter === 'minimal')
    return "ok · the worker's own model loop: nothing remote to probe (its model has a Test of its own)";
  return r.ok ? `ok · ${r.latencyMs} ms` : `error: ${r.error}`;
}

const perMtok = (n: number | null) => (n === null ? html`<span class="muted">as input</span>` : `$${n}`);

function priceRow(p: ModelPrice, action: SafeHtml | ''): SafeHtml {
  return html`<tr data-price="${p.model}">
    <td><code>${p.model}</code></td>
    <td class="num">${perMtok(p.inputPerMtok)}</td>
    <td class="num">${perMtok(p.outputPerMtok)}</td>
    <td class="num">${perMtok(p.cacheReadPerMtok)}</td>
    <td class="num">${perMtok(p.cacheWritePerMtok)}</td>
    <td>${action}</td>
  </tr>`;
}

/** Prices (USD per million tokens) and the daily cap: the workspace's own, then the shipped table. */
function pricesContent(s: SettingsView, view: ActionView | undefined): SafeHtml {
  const own = s.prices ?? [];
  const head = html`<thead>
    <tr>
      <th>Model</th>
      <th>Input</th>
      <th>Output</th>
      <th>Cache read</th>
      <th>Cache write</th>
      <th></th>
    </tr>
  </thead>`;
  const rows = own.map((p) =>
    priceRow(p, view ? post(`/settings/prices/${enc(p.model)}/rm`, view, html``, 'Remove', `rm-price-${p.model}`) : ''),
  );
  const overridden = new Set(own.map((p) => p.model));
  const cap = s.dailyCapUsd ?? null;
  const amount = (name: string, label: string, required = false) =>
    field(
      label,
      required
        ? html`<input name="${name}" inputmode="decimal" required />`
        : html`<input name="${name}" inputmode="decimal" placeholder="as input" />`,
    );
  return html`<h2>Prices and budget</h2>
    <p data-testid="daily-cap">
      Daily cap: <strong>${cap === null ? 'none' : formatUsd(cap)}</strong>; spent today (UTC, priced):
      ${formatUsd(s.spentTodayUsd ?? 0)}.
    </p>
    ${
      view
        ? post('/settings/budget', view, amount('dailyUsd', 'Daily cap (USD)', true), 'Set daily cap', 'set-daily-cap')
        : ''
    }
    <p class="muted">
      USD per million tokens. A workspace price overrides the shipped one of the same name; a model id matches a name it
      equals or extends with "-" (a dated id).
    </p>
    ${
      rows.length
        ? html`<table data-testid="prices">
            ${head}
            <tbody>
              ${rows}
            </tbody>
          </table>`
        : html`<div class="empty" data-testid="prices">No prices of this workspace: the shipped table applies.</div>`
    }
    ${
      view
        ? post(
            '/settings/prices',
            view,
            html`${field('Model', html`<input name="model" required />`)} ${amount('input', 'Input per million', true)}
            ${amount('output', 'Output per million', true)} ${amount('cacheRead', 'Cache read per million')}
            ${amount('cacheWrite', 'Cache write per million')} `,
            'Set price',
            'set-price',
          )
        : ''
    }
    <details>
      <summary>Shipped prices (as of ${SHIPPED_PRICES_AS_OF})</summary>
      <table data-testid="shipped-prices">
        ${head}
        <tbody>
          ${SHIPPED_PRICES.map((p) =>
            priceRow(p, overridden.has(p.model) ? html`<span class="muted">overridden</span>` : ''),
          )}
        </tbody>
      </table>
    </details>`;
}

export function settingsContent(s: SettingsView, view: ActionView | undefined): SafeHtml {
  const n = s.notice;
  const notice = n?.error
    ? html`<div class="error" data-testid="settings-error">${n.error}</div>`
    : n?.test
      ? html`<div class="${n.test.ok ? 'notice ok' : 'error'}" data-testid="test-result-${n.alias ?? ''}">
          Test of ${n.alias ?? ''}: ${testResultText(n.test)}
        </div>`
      : '';
  const models = s.models.map(
    (m) =>
      html`<tr data-model="${m.alias}">
        <td><code>${m.alias}</code></td>
        <td>${m.provider}</td>
        <td class="mono">${m.base_url ? redactString(m.base_url) : '(provider default)'}</td>
        <td>${m.model}</td>
        <td class="mono">${m.api_key_env_var ?? '—'}</td>
        <td>
          ${
            view
              ? html`${post(`/settings/models/${enc(m.alias)}/test`, view, html``, 'Test', `test-${m.alias}`)}${post(`/settings/models/${enc(m.alias)}/rm`, view, html``, 'Remove', `rm-model-${m.alias}`)}`
              : ''
          }
        </td>
      </tr>`,
  );
  const harnesses = s.harnesses.map(
    (h) =>
      html`<tr data-harness="${h.alias}">
        <td><code>${h.alias}</code></td>
        <td>
          ${h.adapter}${
            h.endpoint_url ? html` <span class="mono">${redactString(h.endpoint_url)}</span>` : ''
          }${h.key_env_var ? html` · <span class="mono">${h.key_env_var}</span>` : ''}
        </td>
        <td>${h.needs_worktree ? 'own worktree' : 'repo root'}</td>
        <td>
          ${h.allowed_commands.length ? h.allowed_commands.map((c) => html`<code>${c}</code> `) : html`<span class="muted">no run_command</span>`}
        </td>
        <td>${h.write_prefixes ? h.write_prefixes.join(', ') : html`<span class="muted">anywhere</span>`}</td>
        <td>
          ${
            view
              ? html`${post(`/settings/harnesses/${enc(h.alias)}/test`, view, html``, 'Test', `test-harness-${h.alias}`)}${post(`/settings/harnesses/${enc(h.alias)}/rm`, view, html``, 'Remove', `rm-harness-${h.alias}`)}`
              : ''
          }
        </td>
      </tr>`,
  );
  const overridden = new Set(s.harnesses.map((h) => h.alias));
  const builtins = (s.builtins ?? [])
    .filter((b) => !overridden.has(b.alias))
    .map(
      (b) =>
        html`<tr data-harness="${b.alias}">
          <td><code>${b.alias}</code> <span class="badge">built-in</span></td>
          <td>${b.adapter}</td>
          <td>${b.needsWorktree ? 'own worktree' : 'repo root'}</td>
          <td>
            ${b.allowedCommands?.length ? b.allowedCommands.map((c) => html`<code>${c}</code> `) : html`<span class="muted">no run_command</span>`}
          </td>
          <td>${b.writePrefixes ? b.writePrefixes.join(', ') : html`<span class="muted">anywhere</span>`}</td>
          <td>
            ${view ? post(`/settings/harnesses/${enc(b.alias)}/test`, view, html``, 'Test', `test-harness-${b.alias}`) : ''}
          </td>
        </tr>`,
    );
  const known = new Set([...overridden, ...(s.builtins ?? []).map((b) => b.alias)]);
  const routes = s.routes.map(
    (r) =>
      html`<tr>
        <td>${r.role_id}</td>
        <td>
          <code>${r.harness_alias}</code>${
            known.has(r.harness_alias)
              ? ''
              : html` <span class="badge stalled" data-testid="route-missing-${r.role_id}"
                  >no such harness: jobs of this role are refused</span
                >`
          }
        </td>
        <td>
          ${view ? post(`/settings/routes/${enc(r.role_id)}/rm`, view, html``, 'Remove', `rm-route-${r.role_id}`) : ''}
        </td>
      </tr>`,
  );
  const table = (head: string[], rows: SafeHtml[], empty: string, testid: string) =>
    rows.length
      ? html`<table data-testid="${testid}">
          <thead>
            <tr>
              ${head.map((h) => html`<th>${h}</th>`)}
            </tr>
          </thead>
          <tbody>
            ${rows}
          </tbody>
        </table>`
      : html`<div class="empty" data-testid="${testid}">${empty}</div>`;
  return html`<nav class="crumbs"><a href="/">Convoys</a> / settings</nav>
    <h1>Settings</h1>
    ${notice}
    <h2>Model providers</h2>
    ${table(['Alias', 'Provider', 'Base URL', 'Model', 'Key variable', ''], models, 'No model providers: jobs use replay:<path> or add one.', 'models')}
    ${
      view
        ? post(
            '/settings/models',
            view,
            html`${field('Alias', html`<input name="alias" required />`)}
            ${field(
              'Provider',
              html`<select name="provider">
                <option>openai-compatible</option>
                <option>anthropic</option>
                <option>openai</option>
              </select>`,
            )}
            ${field('Base URL', html`<input name="baseUrl" placeholder="https://…/v1 (optional for anthropic, openai)" />`)}
            ${field('Model', html`<input name="model" required />`)}
            ${field('Key variable', html`<input name="keyEnv" placeholder="optional" />`)} `,
            'Add model',
            'add-model',
          )
        : ''
    }
    <h2>Harnesses</h2>
    ${table(['Alias', 'Adapter', 'Works in', 'Allowed commands', 'Write prefixes', ''], [...builtins, ...harnesses], 'No harnesses.', 'harnesses')}
    ${
      view
        ? post(
            '/settings/harnesses',
            view,
            html`${field('Alias', html`<input name="alias" required />`)}
              <label><input type="checkbox" name="worktree" checked /> own worktree</label>
              ${field('Allowed commands', html`<input name="allow" placeholder="one per line or ;-separated" />`)}
              ${field('Write prefixes', html`<input name="writePrefix" placeholder="comma-separated" />`)}
              ${field(
                'Adapter',
                html`<select name="adapter">
                  <option>minimal</option>
                  <option>remote-ag-ui</option>
                  <option>langgraph</option>
                  <option>crewai</option>
                </select>`,
              )}
              ${field('AG-UI endpoint', html`<input name="url" placeholder="remote adapters" />`)}
              ${field('Key variable', html`<input name="keyEnv" placeholder="optional" />`)} `,
            'Add harness',
            'add-harness',
          )
        : ''
    }
    <h2>Role → harness routes</h2>
    ${table(['Role', 'Harness', ''], routes, 'No routes: a job without harnessAlias uses code.', 'routes')}
    ${view ? post('/settings/routes', view, html`${field('Role', html`<input name="role" required />`)} ${field('Harness', html`<input name="harness" required />`)} `, 'Add route', 'add-route') : ''}
    ${pricesContent(s, view)} ${s.storage ? storagePolicySection(s.storage, view) : ''}`;
}
