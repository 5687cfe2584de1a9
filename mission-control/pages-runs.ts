// The run finder: a filter form (status incl. stalled, convoy, text, worker, host, model, branch,
// created and finished ranges) over a keyset-paged table of runs, each with its model, newest
// first. The form is a plain GET, so a filtered page is a link an operator can share, and "Older"
// keeps the filter.
import type { RunFilter, RunListItem, RunPage } from '../store/run-search.ts';
import { RUN_STATUS_FILTERS } from '../store/run-search.ts';
import { html, statusBadge, timeCell, type SafeHtml } from './html.ts';
import { runQueryString } from './run-query.ts';

const enc = encodeURIComponent;

/** The stalled flag carries the lease and status, so the live script can raise it when the lease runs out. */
export function stalledFlag(run: { status: string; stalled: boolean; leaseExpiresAt: Date | null }): SafeHtml {
  return html`<span
    class="badge stalled"
    data-field="stalled"
    data-kind="flag"
    data-lease="${run.leaseExpiresAt?.toISOString() ?? ''}"
    data-running="${run.status === 'running' ? '1' : ''}"
    ${run.stalled ? '' : html` hidden`}
    >stalled</span
  >`;
}

function dateValue(date: Date | undefined): string {
  return date ? date.toISOString().slice(0, 10) : '';
}

function filterForm(filter: RunFilter, error?: string): SafeHtml {
  return html`<form class="filters" method="get" action="/runs" data-testid="run-filter">
    ${error ? html`<div class="error" role="alert">${error}</div>` : ''}
    <label
      >Status
      <select name="status" data-testid="filter-status">
        <option value="">any</option>
        ${RUN_STATUS_FILTERS.map(
          (s) => html`<option value="${s}" ${filter.status === s ? ' selected' : ''}>${s}</option>`,
        )}
      </select></label
    >
    <label>Convoy <input name="convoy" value="${filter.convoy ?? ''}" data-testid="filter-convoy" /></label>
    <label
      >Search
      <input name="q" value="${filter.q ?? ''}" data-testid="filter-q" title="brief, branch, worker, host or run id"
    /></label>
    <label>Worker <input name="worker" value="${filter.worker ?? ''}" data-testid="filter-worker" /></label>
    <label>Host <input name="host" value="${filter.host ?? ''}" data-testid="filter-host" /></label>
    <label>Model <input name="model" value="${filter.model ?? ''}" data-testid="filter-model" /></label>
    <label>Branch <input name="branch" value="${filter.branch ?? ''}" data-testid="filter-branch" /></label>
    <label>Created from <input type="date" name="from" value="${dateValue(filter.createdFrom)}" /></label>
    <label>Created before <input type="date" name="to" value="${dateValue(filter.createdTo)}" /></label>
    <label
      >Finished from
      <input
        type="date"
        name="finishedFrom"
        value="${dateValue(filter.finishedFrom)}"
        data-testid="filter-finished-from"
    /></label>
    <label
      >Finished before
      <input type="date" name="finishedTo" value="${dateValue(filter.finishedTo)}" data-testid="filter-finished-to"
    /></label>
    <button type="submit" data-testid="filter-apply">Filter</button> <a href="/runs">clear</a>
  </form>`;
}

function runRow(run: RunListItem): SafeHtml {
  return html`<tr data-run-id="${run.agentRunId}">
    <td class="run">
      <a href="/runs/${enc(run.agentRunId)}" title="${run.agentRunId}"><strong>${run.briefId}</strong></a>
      <div class="muted mono">run ${run.agentRunId.slice(0, 8)}</div>
    </td>
    <td>${statusBadge(run.status)} ${stalledFlag(run)}</td>
    <td><a href="/convoys/${enc(run.convoyId)}">${run.convoyId}</a></td>
    <td class="num big" data-field="checkpointCount">${run.checkpointCount}</td>
    <td class="mono">${run.workerId ?? '—'}${run.hostId ? html`<div class="muted">${run.hostId}</div>` : ''}</td>
    <td class="mono wrap" data-field="model">${run.model ?? '—'}</td>
    <td class="mono wrap">${run.branch ?? '—'}</td>
    <td>${timeCell(run.createdAt, 'createdAt')}</td>
  </tr>`;
}

export function runListContent(page: RunPage, filter: RunFilter, cursor: string | null, error?: string): SafeHtml {
  const table = page.runs.length
    ? html`<table data-testid="run-list">
        <thead>
          <tr>
            <th>Run</th>
            <th>Status</th>
            <th>Convoy</th>
            <th>Checkpoints</th>
            <th>Worker · host</th>
            <th>Model</th>
            <th>Branch</th>
            <th>Created</th>
          </tr>
        </thead>
        <tbody>
          ${page.runs.map(runRow)}
        </tbody>
      </table>`
    : html`<div class="empty" data-testid="run-list-empty">No run matches.</div>`;
  const newest = cursor ? html`<a href="/runs${runQueryString(filter)}" data-testid="newest">Newest</a>` : '';
  const olderUrl = `/runs${runQueryString(filter, page.cursor)}`;
  const older = page.cursor ? html`<a href="${olderUrl}" data-testid="older">Older →</a>` : '';
  const pager = html`<nav class="pager">${newest}${older}</nav>`;
  return html`<nav class="crumbs"><a href="/">Convoys</a> / runs</nav>
    <h1>Runs</h1>
    ${filterForm(filter, error)} ${table} ${pager}`;
}
