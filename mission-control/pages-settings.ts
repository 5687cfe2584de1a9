// The Settings page of a workspace: its model providers (each with a Test button), harnesses and
// role → harness routes, with forms to add and remove them. Key variables are shown by name
// only; their values are never read here. A read-only token sees the same tables, no forms.
import type { HarnessRow, ModelProviderRow } from '../store/workspace-config.ts';
import type { RouteRow } from '../store/workspace-settings.ts';
import { redactString } from '../core/redact.ts';
import type { HarnessTestResult, ModelTestResult } from '../operator/settings.ts';
import { html, type SafeHtml } from './html.ts';
import type { ActionView } from './pages-actions.ts';

export interface SettingsView {
  models: ModelProviderRow[];
  harnesses: HarnessRow[];
  routes: RouteRow[];
  /** The outcome of the last Test, or a refused form, shown at the top. */
  notice?: { alias?: string; test?: ModelTestResult | HarnessTestResult; error?: string };
}

const enc = encodeURIComponent;

function post(action: string, view: ActionView, fields: SafeHtml, label: string, testid: string): SafeHtml {
  return html`<form class="action" method="post" action="${action}"><input type="hidden" name="_csrf" value="${view.csrf}">${fields}<button type="submit" data-testid="${testid}">${label}</button></form>`;
}

export function testResultText(r: ModelTestResult | HarnessTestResult): string {
  return r.ok ? `ok · ${r.latencyMs} ms` : `error: ${r.error}`;
}

export function settingsContent(s: SettingsView, view: ActionView | undefined): SafeHtml {
  const n = s.notice;
  const notice = n?.error
    ? html`<div class="error" data-testid="settings-error">${n.error}</div>`
    : n?.test
      ? html`<div class="${n.test.ok ? 'notice ok' : 'error'}" data-testid="test-result-${n.alias ?? ''}">Test of ${n.alias ?? ''}: ${testResultText(n.test)}</div>`
      : '';
  const models = s.models.map(
    (m) => html`<tr data-model="${m.alias}"><td><code>${m.alias}</code></td><td>${m.provider}</td><td class="mono">${m.base_url ? redactString(m.base_url) : '(provider default)'}</td>
<td>${m.model}</td><td class="mono">${m.api_key_env_var ?? '—'}</td><td>${
      view
        ? html`${post(`/settings/models/${enc(m.alias)}/test`, view, html``, 'Test', `test-${m.alias}`)}${post(`/settings/models/${enc(m.alias)}/rm`, view, html``, 'Remove', `rm-model-${m.alias}`)}`
        : ''
    }</td></tr>`,
  );
  const harnesses = s.harnesses.map(
    (h) => html`<tr data-harness="${h.alias}"><td><code>${h.alias}</code></td><td>${h.adapter}${
      h.endpoint_url ? html` <span class="mono">${redactString(h.endpoint_url)}</span>` : ''}${h.key_env_var ? html` · <span class="mono">${h.key_env_var}</span>` : ''}</td>
<td>${h.needs_worktree ? 'own worktree' : 'repo root'}</td>
<td>${h.allowed_commands.length ? h.allowed_commands.map((c) => html`<code>${c}</code> `) : html`<span class="muted">no run_command</span>`}</td>
<td>${h.write_prefixes ? h.write_prefixes.join(', ') : html`<span class="muted">anywhere</span>`}</td><td>${
      view
        ? html`${post(`/settings/harnesses/${enc(h.alias)}/test`, view, html``, 'Test', `test-harness-${h.alias}`)}${post(`/settings/harnesses/${enc(h.alias)}/rm`, view, html``, 'Remove', `rm-harness-${h.alias}`)}`
        : ''
    }</td></tr>`,
  );
  const routes = s.routes.map(
    (r) => html`<tr><td>${r.role_id}</td><td><code>${r.harness_alias}</code></td><td>${
      view ? post(`/settings/routes/${enc(r.role_id)}/rm`, view, html``, 'Remove', `rm-route-${r.role_id}`) : ''
    }</td></tr>`,
  );
  const table = (head: string[], rows: SafeHtml[], empty: string, testid: string) =>
    rows.length
      ? html`<table data-testid="${testid}"><thead><tr>${head.map((h) => html`<th>${h}</th>`)}</tr></thead><tbody>${rows}</tbody></table>`
      : html`<div class="empty" data-testid="${testid}">${empty}</div>`;
  return html`<nav class="crumbs"><a href="/">Convoys</a> / settings</nav>
<h1>Settings</h1>
${notice}
<h2>Model providers</h2>
${table(['Alias', 'Provider', 'Base URL', 'Model', 'Key variable', ''], models, 'No model providers: jobs use replay:<path> or add one.', 'models')}
${view ? post('/settings/models', view, html`<input name="alias" placeholder="alias" required> <input name="baseUrl" placeholder="https://…/v1 (optional for anthropic, openai)">
<input name="model" placeholder="model" required> <input name="keyEnv" placeholder="KEY variable (optional)">
<select name="provider"><option>openai-compatible</option><option>anthropic</option><option>openai</option></select> `, 'Add model', 'add-model') : ''}
<h2>Harnesses</h2>
${table(['Alias', 'Adapter', 'Works in', 'Allowed commands', 'Write prefixes', ''], harnesses, 'Only the built-in harnesses: code and doc-writer.', 'harnesses')}
${view ? post('/settings/harnesses', view, html`<input name="alias" placeholder="alias" required> <label><input type="checkbox" name="worktree" checked> own worktree</label>
<input name="allow" placeholder="allowed commands, one per line or ;-separated"> <input name="writePrefix" placeholder="write prefixes, comma-separated">
<select name="adapter"><option>minimal</option><option>remote-ag-ui</option><option>langgraph</option><option>crewai</option></select>
<input name="url" placeholder="AG-UI endpoint (remote adapters)"> <input name="keyEnv" placeholder="KEY variable (optional)"> `, 'Add harness', 'add-harness') : ''}
<h2>Role → harness routes</h2>
${table(['Role', 'Harness', ''], routes, 'No routes: a job without harnessAlias uses code.', 'routes')}
${view ? post('/settings/routes', view, html`<input name="role" placeholder="role" required> <input name="harness" placeholder="harness" required> `, 'Add route', 'add-route') : ''}`;
}
