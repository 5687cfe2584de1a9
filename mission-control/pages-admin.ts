// Sign-in, the admin fleet rollup, and plain message pages (403, 404).
import type { FleetSpend } from '../store/fleet-metrics.ts';
import type { FleetWorkspace } from '../store/mission-control.ts';
import { html, timeCell, type SafeHtml } from './html.ts';
import { formatTokens, formatUsd } from './pages-usage.ts';

/** `next`: the page asked for before sign-in, returned to after it. */
export function loginContent(error?: string, next?: string): SafeHtml {
  return html`<form class="login" method="post" action="/login" data-testid="login-form">
    ${next ? html`<input type="hidden" name="next" value="${next}" />` : ''}
    <h1>Sign in</h1>
    <p class="muted">
      Paste a mission control token (<code>npm run mission-control -- token create --workspace W</code>).
    </p>
    ${error ? html`<div class="error" role="alert">${error}</div>` : ''}
    <label for="token">Token</label>
    <input id="token" name="token" type="password" autocomplete="off" spellcheck="false" required autofocus />
    <button type="submit">Sign in</button>
  </form>`;
}

export function messageContent(title: string, text: string): SafeHtml {
  return html`<h1>${title}</h1>
    <div class="empty">${text}</div>`;
}

/** A workspace's spend today (UTC): priced cost, with its unpriced records named, against its cap. */
function spendCell(s: FleetSpend | undefined): SafeHtml {
  if (!s) return html`<span class="muted">—</span>`;
  const unpriced = s.unpriced ? html` <span class="muted">(+${s.unpriced} unpriced)</span>` : '';
  const cap = s.daily_usd === null ? '' : html` of ${formatUsd(s.daily_usd)}`;
  return html`${formatUsd(s.cost_usd)}${cap}${unpriced}`;
}

/** A workspace of the fleet rollup with its spend today (UTC); undefined when it has spent nothing. */
export type FleetRow = FleetWorkspace & { spend: FleetSpend | undefined };

export function fleetContent(workspaces: FleetRow[]): SafeHtml {
  const total = (key: 'queued' | 'running' | 'stalled' | 'checkpointsLastMinute') =>
    workspaces.reduce((n, w) => n + w[key], 0);
  return html`<h1>Fleet</h1>
    <p><a href="/fleet/storage" data-testid="fleet-storage-link">Storage across the fleet →</a></p>
    <section class="cards">
      <div class="card primary">
        <div class="label">Checkpoints / min</div>
        <div class="value" data-testid="fleet-rate">${total('checkpointsLastMinute')}</div>
      </div>
      <div class="card">
        <div class="label">Running</div>
        <div class="value">${total('running')}</div>
      </div>
      <div class="card">
        <div class="label">Stalled</div>
        <div class="value">${total('stalled')}</div>
      </div>
      <div class="card">
        <div class="label">Queued</div>
        <div class="value">${total('queued')}</div>
      </div>
    </section>
    <h2>Workspaces</h2>
    ${
      workspaces.length
        ? html`<table data-testid="fleet-table">
            <thead>
              <tr>
                <th>Workspace</th>
                <th>Checkpoints / min</th>
                <th>Queued</th>
                <th>Running</th>
                <th>Stalled</th>
                <th>Completed 24 h</th>
                <th>Failed 24 h</th>
                <th>Tokens today</th>
                <th>Spent today</th>
                <th>Budget stops today</th>
                <th>Workers (last heartbeat)</th>
              </tr>
            </thead>
            <tbody>
              ${workspaces.map(
                (w) =>
                  html`<tr data-workspace-id="${w.workspaceId}">
                    <td><strong>${w.workspaceId}</strong></td>
                    <td class="num big">${w.checkpointsLastMinute}</td>
                    <td class="num">${w.queued}</td>
                    <td class="num">${w.running}</td>
                    <td class="num">${w.stalled ? html`<span class="badge stalled">${w.stalled}</span>` : '0'}</td>
                    <td class="num">${w.completedLastDay}</td>
                    <td class="num">${w.failedLastDay}</td>
                    <td class="num" data-tokens-today>${formatTokens(w.spend?.tokens ?? 0)}</td>
                    <td class="num" data-spend-today>${spendCell(w.spend)}</td>
                    <td class="num" data-budget-stops>${w.spend?.budget_exhausted ?? 0}</td>
                    <td>
                      ${w.workers.length ? w.workers.map((k) => html`<div><span class="mono">${k.workerId}</span> ${timeCell(k.lastHeartbeatAt ? new Date(k.lastHeartbeatAt) : null)}</div>`) : html`<span class="muted">none in 24 h</span>`}
                    </td>
                  </tr>`,
              )}
            </tbody>
          </table>`
        : html`<div class="empty">No workspaces.</div>`
    }`;
}
