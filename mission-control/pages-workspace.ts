// The workspace pages: convoy list → convoy panel → run timeline. Checkpoint count and last
// checkpoint time come first and largest everywhere: they are what an operator checks to see
// whether work is moving.
import type { ConvoyDetail, ConvoyFilter, ConvoyPage, RunSummary } from '../store/mission-control.ts';
import { RUN_STATUS_FILTERS } from '../store/run-search.ts';
import { convoyQueryString } from './run-query.ts';
import { stalledFlag } from './pages-runs.ts';
import type { ChainVerdict } from '../store/chain-verdict.ts';
import type { RunOverview, TimelineCheckpoint, TimelineEvent, TimelinePage, ToolCall } from '../store/run-timeline.ts';
import { redactString, redactValue } from '../core/redact.ts';
import { formatAge, html, shortOid, statusBadge, timeCell, type SafeHtml } from './html.ts';
import { checkpointActions, isCancellable, runActions, type ActionView } from './pages-actions.ts';

const enc = encodeURIComponent;

/** The convoy list's filter: a plain GET form, so a filtered list is a link to share. */
function convoyFilterForm(filter: ConvoyFilter, error?: string): SafeHtml {
  return html`<form class="filters" method="get" action="/" data-testid="convoy-filter">
    ${error ? html`<div class="error" role="alert">${error}</div>` : ''}
    <label
      >Search <input name="q" value="${filter.q ?? ''}" data-testid="convoy-filter-q" title="convoy id, a run's brief"
    /></label>
    <label
      >With a run
      <select name="status" data-testid="convoy-filter-status">
        <option value="">any</option>
        ${RUN_STATUS_FILTERS.map(
          (s) => html`<option value="${s}" ${filter.status === s ? ' selected' : ''}>${s}</option>`,
        )}
      </select></label
    >
    <button type="submit" data-testid="convoy-filter-apply">Filter</button> <a href="/">clear</a>
  </form>`;
}

export function convoyListContent(
  page: ConvoyPage,
  cursor: string | null,
  filter: ConvoyFilter = {},
  error?: string,
): SafeHtml {
  const links = html`<p class="muted">
    <a href="/runs" data-testid="runs-link">Find runs</a> by status, convoy, brief, worker, branch ·
    <a href="/storage" data-testid="storage-link">Storage</a> ·
    <a href="/settings" data-testid="settings-link">Settings</a>: models, harnesses, routes
  </p>`;
  const pager = html`<nav class="pager">
    ${cursor ? html`<a href="/${convoyQueryString(filter)}" data-testid="newest">Newest</a>` : ''}${
      page.cursor ? html`<a href="/${convoyQueryString(filter, page.cursor)}" data-testid="older">Older →</a>` : ''
    }
  </nav>`;
  const filtered = Boolean(filter.q || filter.status);
  if (!page.convoys.length)
    return html`<h1>Convoys</h1>
      ${links} ${convoyFilterForm(filter, error)}
      <div class="empty" data-testid="convoy-list-empty">
        ${filtered ? 'No convoy matches.' : 'No convoys in this workspace yet.'}
      </div>
      ${pager}`;
  return html`<h1>Convoys</h1>
    ${links} ${convoyFilterForm(filter, error)}
    <table data-testid="convoy-list">
      <thead>
        <tr>
          <th>Convoy</th>
          <th>Checkpoints</th>
          <th>Last checkpoint</th>
          <th>Queued</th>
          <th>Running</th>
          <th>Completed</th>
          <th>Failed</th>
          <th>Cancelled</th>
        </tr>
      </thead>
      <tbody>
        ${page.convoys.map(
          (c) =>
            html`<tr data-convoy-id="${c.convoyId}">
              <td>
                <a href="/convoys/${enc(c.convoyId)}"><strong>${c.convoyId}</strong></a>
              </td>
              <td class="num big" data-field="checkpointCount">${c.checkpointCount}</td>
              <td>${timeCell(c.lastCheckpointAt, 'lastCheckpointAt')}</td>
              <td class="num">${c.runs.queued}</td>
              <td class="num">${c.runs.running}</td>
              <td class="num">${c.runs.completed}</td>
              <td class="num">${c.runs.failed}</td>
              <td class="num" data-field="cancelled">${c.runs.cancelled}</td>
            </tr>`,
        )}
      </tbody>
    </table>
    ${pager}`;
}

/** Heartbeat, and under it the lease: "lease in 8 s", or "lease expired 20 s ago" with a stalled flag. */
function heartbeatCell(run: RunSummary, now: number): SafeHtml {
  const stalled = run.status === 'running' && run.leaseExpiresAt !== null && run.leaseExpiresAt.getTime() < now;
  const lease = run.leaseExpiresAt?.toISOString() ?? '';
  return html`${timeCell(run.heartbeatAt, 'heartbeatAt')}
    <div class="lease muted">
      lease
      <span class="when" data-field="leaseExpiresAt" data-iso="${lease}"
        ><small class="age">${run.leaseExpiresAt ? formatAge(run.leaseExpiresAt, now) : '—'}</small></span
      >
      ${stalledFlag({ ...run, stalled })}
    </div>`;
}

export function convoyDetailContent(convoy: ConvoyDetail, now = Date.now()): SafeHtml {
  const count = (status: string) => convoy.runs.filter((r) => r.status === status).length;
  const rows = convoy.runs.map(
    (run) =>
      html`<tr data-run-id="${run.agentRunId}">
        <td class="run">
          <a href="/runs/${enc(run.agentRunId)}" title="${run.agentRunId}"><strong>${run.briefId}</strong></a>
          <div class="muted mono">run ${run.agentRunId.slice(0, 8)}</div>
        </td>
        <td class="num big" data-field="checkpointCount" data-testid="run-checkpoint-count">${run.checkpointCount}</td>
        <td>${timeCell(run.lastCheckpointAt, 'lastCheckpointAt')}</td>
        <td>${statusBadge(run.status)}</td>
        <td class="num" data-field="attempt">${run.attempt}</td>
        <td class="num" data-field="step">${run.step}</td>
        <td class="mono" data-field="workerId">${run.workerId ?? '—'}</td>
        <td>${heartbeatCell(run, now)}</td>
      </tr>`,
  );
  return html`<nav class="crumbs"><a href="/">Convoys</a> / ${convoy.convoyId}</nav>
    <h1 data-testid="convoy-id">${convoy.convoyId}</h1>
    <section class="cards convoy" data-convoy-totals>
      <div class="card primary">
        <div class="label">Checkpoints</div>
        <div class="value" data-field="checkpointCount" data-testid="convoy-checkpoint-count">
          ${convoy.checkpointCount}
        </div>
      </div>
      <div class="card primary">
        <div class="label">Last checkpoint</div>
        ${timeCell(convoy.lastCheckpointAt, 'lastCheckpointAt', 'convoy-last-checkpoint-at')}
      </div>
      <div class="card">
        <div class="label">Runs</div>
        <div class="value">${convoy.runs.length}</div>
        <div class="statuses">
          ${(['running', 'queued', 'completed', 'failed', 'cancelled'] as const).map(
            (s) => html`<span class="badge status-${s}"><span data-field="runs-${s}">${count(s)}</span> ${s}</span>`,
          )}
        </div>
      </div>
    </section>
    <h2>Runs</h2>
    ${
      convoy.runs.length
        ? html`<table data-testid="run-table">
            <thead>
              <tr>
                <th>Run</th>
                <th>Checkpoints</th>
                <th>Last checkpoint</th>
                <th>Status</th>
                <th>Attempt</th>
                <th>Step</th>
                <th>Worker</th>
                <th>Heartbeat · lease</th>
              </tr>
            </thead>
            <tbody>
              ${rows}
            </tbody>
          </table>`
        : html`<div class="empty">No runs in this convoy yet.</div>`
    }`;
}

function metadataText(metadata: Record<string, unknown>): string {
  return Object.entries(metadata)
    .map(([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`)
    .join(' · ');
}

export interface RunPageView {
  run: RunOverview;
  page: TimelinePage;
  events: TimelineEvent[];
  verdict: ChainVerdict;
  /** The `before` seq this page was asked for; null on the newest page. */
  before: number | null;
  /** A doc-writer run's files and review (pages-doc-review.ts), under the facts. */
  review?: SafeHtml;
}

function verdictCard(verdict: ChainVerdict): SafeHtml {
  const [cls, text] =
    verdict.state === 'verifies'
      ? ['verified', 'verifies']
      : verdict.state === 'broken'
        ? ['broken', `broken at ${verdict.brokenSeq}`]
        : ['muted', 'no checkpoints yet'];
  return html`<div class="card">
    <div class="label">Hash chain</div>
    <div class="value small ${cls}" data-testid="chain-verdict">${text}</div>
    ${verdict.state === 'broken' ? html`<div class="muted">${verdict.problem}</div>` : ''}
  </div>`;
}

/** "4 min 12 s": from start (or creation) to finish, or to now while the run is not finished. */
export function formatDuration(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 90) return `${s} s`;
  if (s < 5400) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.round((s % 3600) / 60)} min`;
}

function copyable(value: string | null, testid: string): SafeHtml {
  if (!value) return html`<span class="muted">—</span>`;
  return html`<code class="copyable" data-testid="${testid}">${value}</code>
    <button type="button" class="copy" data-copy="${value}" aria-label="copy ${testid}">copy</button>`;
}

function runFacts(run: RunOverview, now: number): SafeHtml {
  const duration = (run.finishedAt?.getTime() ?? now) - (run.startedAt ?? run.createdAt).getTime();
  const fact = (label: string, value: SafeHtml | string, testid: string) =>
    html`<dt>${label}</dt>
      <dd data-testid="${testid}">${value}</dd>`;
  return html`<dl class="facts" data-testid="run-facts">
    ${fact('Brief', html`<div class="brief">${run.brief ?? '—'}</div>`, 'run-brief')}
    ${fact('Harness', run.harnessAlias ?? '—', 'run-harness')}
    ${fact('Adapter', run.threadId ? `${run.adapter} · thread ${run.threadId}` : run.adapter, 'run-adapter')}
    ${fact('Model', run.model ?? '—', 'run-model')}
    ${fact('Duration', `${formatDuration(duration)}${run.finishedAt ? '' : ' so far'}`, 'run-duration')}
    ${fact('Attempts', String(run.attempt), 'run-attempts')}
    ${fact('Worker · host', `${run.workerId ?? '—'} · ${run.hostId ?? '—'}`, 'run-host')}
    ${fact('Worktree', copyable(run.worktreePath, 'worktree'), 'run-worktree')}
    ${fact('Branch', copyable(run.branch, 'branch'), 'run-branch')}
    ${fact('Commit', copyable(run.lastCommitOid, 'commit'), 'run-commit')}
  </dl>`;
}

/** `actions`: the viewer may act (fork, retry, cancel); without it the timeline only links the diffs. */
export function runTimelineContent(view: RunPageView, actions?: ActionView, now = Date.now()): SafeHtml {
  const { run, page, events, verdict } = view;
  // Newest first; at equal times the event goes first (a resume follows its checkpoint).
  const items = [
    ...page.checkpoints.map((c) => ({
      at: c.occurredAt.getTime(),
      order: 0,
      view: checkpointItem(c, run.agentRunId, actions, isCancellable(run.status)),
    })),
    ...events.map((e) => ({
      at: e.occurredAt.getTime(),
      order: 1,
      view: html`<li class="event event-${e.type}" data-event-type="${e.type}">
        <div class="row">
          <strong>${e.type}</strong> ${timeCell(e.occurredAt)}<span class="muted wrap"
            >${metadataText(e.metadata)}</span
          >
        </div>
      </li>`,
    })),
  ].sort((a, b) => b.at - a.at || b.order - a.order);
  const runUrl = `/runs/${enc(run.agentRunId)}`;
  const pager = html`<nav class="pager">
    ${view.before !== null ? html`<a href="${runUrl}" data-testid="newest">Newest</a>` : ''}${
      page.older !== null ? html`<a href="${runUrl}?before=${page.older}" data-testid="older">Older →</a>` : ''
    }
  </nav>`;
  return html`<nav class="crumbs">
      <a href="/">Convoys</a> / <a href="/convoys/${enc(run.convoyId)}">${run.convoyId}</a> / run
    </nav>
    <h1>${run.briefId}<span class="sub mono" data-testid="run-id">run ${run.agentRunId}</span></h1>
    <section class="cards">
      <div class="card primary">
        <div class="label">Checkpoints</div>
        <div class="value" data-testid="run-checkpoint-count">${run.checkpointCount}</div>
      </div>
      <div class="card primary">
        <div class="label">Last checkpoint</div>
        ${timeCell(run.lastCheckpointAt, undefined, 'run-last-checkpoint-at')}
      </div>
      <div class="card">
        <div class="label">Status</div>
        <div class="value small" data-testid="run-status">${statusBadge(run.status)} ${stalledFlag(run)}</div>
        <div class="muted">attempt ${run.attempt} · step ${run.step} · worker ${run.workerId ?? '—'}</div>
        ${run.leaseExpiresAt && run.status === 'running' ? html`<div class="lease muted">lease ${timeCell(run.leaseExpiresAt, 'leaseExpiresAt')}</div>` : ''}
        ${run.failureReason ? html`<div class="muted">${run.failureReason}</div>` : ''}
        ${runActions({ agentRunId: run.agentRunId, status: run.status, stalled: run.stalled }, actions)}
      </div>
      ${verdictCard(verdict)}
    </section>
    ${runFacts(run, now)}${view.review ?? ''}
    <h2>Timeline <span class="muted">newest first</span></h2>
    ${
      items.length
        ? html`<ol class="timeline" data-testid="timeline">
            ${items.map((i) => i.view)}
          </ol>`
        : html`<div class="empty">No checkpoints yet.</div>`
    }
    ${pager}`;
}

/** Each call's input and result as stored (redacted when recorded), cut for the page. */
function callItem(call: ToolCall): SafeHtml {
  const show = (value: unknown) => {
    const text = typeof value === 'string' ? value : (JSON.stringify(value, null, 2) ?? '');
    return text.length > CALL_TEXT_LIMIT
      ? `${text.slice(0, CALL_TEXT_LIMIT)}\n… ${text.length - CALL_TEXT_LIMIT} more chars`
      : text;
  };
  return html`<details class="call" data-tool="${call.tool}">
    <summary>
      <span class="chip">${call.tool}</span>${call.ok === false ? html`<span class="broken">error</span>` : ''}
    </summary>
    <div class="muted">input</div>
    <pre class="args">${show(redactValue(call.input))}</pre>
    ${
      call.error
        ? html`<div class="muted">error</div>
            <pre class="args">${redactString(call.error)}</pre>`
        : ''
    }${
      call.result !== undefined
        ? html`<div class="muted">result</div>
            <pre class="args">${show(redactValue(call.result))}</pre>`
        : ''
    }
  </details>`;
}

const CALL_TEXT_LIMIT = 4000;

function checkpointItem(c: TimelineCheckpoint, runId: string, actions?: ActionView, rewindable = false): SafeHtml {
  return html`<li class="checkpoint" data-seq="${c.seq}">
    <div class="row">
      <span class="seq">#${c.seq}</span>${timeCell(c.occurredAt)}<span>step ${c.step}</span
      ><span class="muted">attempt ${c.attempt}</span>
      <span>${c.files.length} file${c.files.length === 1 ? '' : 's'}</span>
      <span class="mono" title="${c.commitOid ?? ''}">commit ${shortOid(c.commitOid)}</span>
      <span class="mono muted" title="${c.hash}">${c.hash.slice(0, 12)}</span>
      ${checkpointActions(runId, c.seq, c.commitOid !== null, actions, rewindable)}
    </div>
    ${c.calls.length ? html`<div class="calls" data-testid="calls-${c.seq}">${c.calls.map(callItem)}</div>` : html`<span class="muted">no tools</span>`}
    ${
      c.files.length
        ? html`<details>
            <summary>files</summary>
            <ul>
              ${c.files.map(
                (f) =>
                  html`<li>
                    <code>${f.path}</code>
                    <span class="muted mono">${f.deleted ? 'deleted' : (f.sha256 ?? '').slice(0, 12)}</span>
                  </li>`,
              )}
            </ul>
          </details>`
        : ''
    }
  </li>`;
}
