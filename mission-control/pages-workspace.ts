// The workspace pages: convoy list → convoy panel → run timeline. Checkpoint count and last
// checkpoint time come first and largest everywhere: they are what an operator checks to see
// whether work is moving.
import type { ConvoyDetail, ConvoySummary, RunHistory, RunSummary } from '../store/mission-control.ts';
import { formatAge, html, shortOid, statusBadge, timeCell, type SafeHtml } from './html.ts';
import { checkpointActions, runActions, type ActionView } from './pages-actions.ts';

const enc = encodeURIComponent;

export function convoyListContent(convoys: ConvoySummary[]): SafeHtml {
  const settings = html`<p class="muted"><a href="/settings" data-testid="settings-link">Settings</a>: models, harnesses, routes</p>`;
  if (!convoys.length) return html`<h1>Convoys</h1>${settings}<div class="empty">No convoys in this workspace yet.</div>`;
  return html`<h1>Convoys</h1>${settings}
<table data-testid="convoy-list">
<thead><tr><th>Convoy</th><th>Checkpoints</th><th>Last checkpoint</th><th>Queued</th><th>Running</th><th>Completed</th><th>Failed</th></tr></thead>
<tbody>${convoys.map(
    (c) => html`<tr data-convoy-id="${c.convoyId}">
<td><a href="/convoys/${enc(c.convoyId)}"><strong>${c.convoyId}</strong></a></td>
<td class="num big" data-field="checkpointCount">${c.checkpointCount}</td>
<td>${timeCell(c.lastCheckpointAt, 'lastCheckpointAt')}</td>
<td class="num">${c.runs.queued}</td><td class="num">${c.runs.running}</td>
<td class="num">${c.runs.completed}</td><td class="num">${c.runs.failed}</td></tr>`,
  )}</tbody></table>`;
}

/** Heartbeat, and under it the lease: "lease in 8 s", or "lease expired 20 s ago" with a stalled flag. */
function heartbeatCell(run: RunSummary, now: number): SafeHtml {
  const stalled = run.status === 'running' && run.leaseExpiresAt !== null && run.leaseExpiresAt.getTime() < now;
  const lease = run.leaseExpiresAt?.toISOString() ?? '';
  return html`${timeCell(run.heartbeatAt, 'heartbeatAt')}
<div class="lease muted">lease <span class="when" data-field="leaseExpiresAt" data-iso="${lease}"><small class="age">${
    run.leaseExpiresAt ? formatAge(run.leaseExpiresAt, now) : '—'
  }</small></span> <span class="badge stalled" data-field="stalled" data-kind="flag"${stalled ? '' : html` hidden`}>stalled</span></div>`;
}

export function convoyDetailContent(convoy: ConvoyDetail, now = Date.now()): SafeHtml {
  const count = (status: string) => convoy.runs.filter((r) => r.status === status).length;
  const rows = convoy.runs.map(
    (run) => html`<tr data-run-id="${run.agentRunId}">
<td class="run"><a href="/runs/${enc(run.agentRunId)}" title="${run.agentRunId}"><strong>${run.briefId}</strong></a>
<div class="muted mono">run ${run.agentRunId.slice(0, 8)}</div></td>
<td class="num big" data-field="checkpointCount" data-testid="run-checkpoint-count">${run.checkpointCount}</td>
<td>${timeCell(run.lastCheckpointAt, 'lastCheckpointAt')}</td>
<td>${statusBadge(run.status)}</td>
<td class="num" data-field="attempt">${run.attempt}</td>
<td class="num" data-field="step">${run.step}</td>
<td class="mono" data-field="workerId">${run.workerId ?? '—'}</td>
<td>${heartbeatCell(run, now)}</td></tr>`,
  );
  return html`<nav class="crumbs"><a href="/">Convoys</a> / ${convoy.convoyId}</nav>
<h1 data-testid="convoy-id">${convoy.convoyId}</h1>
<section class="cards convoy" data-convoy-totals>
  <div class="card primary"><div class="label">Checkpoints</div>
    <div class="value" data-field="checkpointCount" data-testid="convoy-checkpoint-count">${convoy.checkpointCount}</div></div>
  <div class="card primary"><div class="label">Last checkpoint</div>
    ${timeCell(convoy.lastCheckpointAt, 'lastCheckpointAt', 'convoy-last-checkpoint-at')}</div>
  <div class="card"><div class="label">Runs</div><div class="value">${convoy.runs.length}</div>
    <div class="statuses">${(['running', 'queued', 'completed', 'failed'] as const).map(
      (s) => html`<span class="badge status-${s}"><span data-field="runs-${s}">${count(s)}</span> ${s}</span>`,
    )}</div></div>
</section>
<h2>Runs</h2>
${
  convoy.runs.length
    ? html`<table data-testid="run-table"><thead><tr><th>Run</th><th>Checkpoints</th><th>Last checkpoint</th><th>Status</th>
<th>Attempt</th><th>Step</th><th>Worker</th><th>Heartbeat · lease</th></tr></thead><tbody>${rows}</tbody></table>`
    : html`<div class="empty">No runs in this convoy yet.</div>`
}`;
}

function metadataText(metadata: Record<string, unknown>): string {
  return Object.entries(metadata)
    .map(([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`)
    .join(' · ');
}

/** `actions`: the viewer may act (fork, retry, cancel); without it the timeline only links the diffs. */
export function runTimelineContent(history: RunHistory, actions?: ActionView): SafeHtml {
  const { run, checkpoints, events, chain } = history;
  // Checkpoints and events in time order; at equal times the event goes after (a resume follows its checkpoint).
  const items = [
    ...checkpoints.map((c) => ({ at: c.occurredAt.getTime(), order: 0, view: checkpointItem(c, run.agentRunId, actions) })),
    ...events.map((e) => ({
      at: e.occurredAt.getTime(),
      order: 1,
      view: html`<li class="event event-${e.type}" data-event-type="${e.type}"><div class="row"><strong>${e.type}</strong>
${timeCell(e.occurredAt)}<span class="muted">${metadataText(e.metadata)}</span></div></li>`,
    })),
  ].sort((a, b) => a.at - b.at || a.order - b.order);
  return html`<nav class="crumbs"><a href="/">Convoys</a> / <a href="/convoys/${enc(run.convoyId)}">${run.convoyId}</a> / run</nav>
<h1>${run.briefId}<span class="sub mono" data-testid="run-id">run ${run.agentRunId}</span></h1>
<section class="cards">
  <div class="card primary"><div class="label">Checkpoints</div><div class="value" data-testid="run-checkpoint-count">${run.checkpointCount}</div></div>
  <div class="card primary"><div class="label">Last checkpoint</div>${timeCell(run.lastCheckpointAt, undefined, 'run-last-checkpoint-at')}</div>
  <div class="card"><div class="label">Status</div><div class="value">${statusBadge(run.status)}</div>
    <div class="muted">attempt ${run.attempt} · step ${run.step} · worker ${run.workerId ?? '—'}</div>
    ${run.failureReason ? html`<div class="muted">${run.failureReason}</div>` : ''}
    ${runActions({ agentRunId: run.agentRunId, status: run.status, stalled: run.status === 'running' && !!run.leaseExpiresAt && run.leaseExpiresAt.getTime() < Date.now() }, actions)}</div>
  <div class="card"><div class="label">Hash chain</div>
    <div class="value ${chain.ok ? 'verified' : 'broken'}" data-testid="chain-verdict">${chain.ok ? 'verifies' : 'broken'}</div>
    ${chain.problems.map((p) => html`<div class="muted">${p}</div>`)}</div>
</section>
<p class="muted">convoy ${run.convoyId} · harness ${run.harnessAlias ?? '—'} · branch <code>${run.branch ?? '—'}</code></p>
<h2>Timeline</h2>
${items.length ? html`<ol class="timeline" data-testid="timeline">${items.map((i) => i.view)}</ol>` : html`<div class="empty">No checkpoints yet.</div>`}`;
}

function checkpointItem(c: RunHistory['checkpoints'][number], runId: string, actions?: ActionView): SafeHtml {
  return html`<li class="checkpoint" data-seq="${c.seq}"><div class="row">
<span class="seq">#${c.seq}</span>${timeCell(c.occurredAt)}<span>step ${c.step}</span><span class="muted">attempt ${c.attempt}</span>
<span>${c.tools.length ? c.tools.map((t) => html`<span class="chip">${t}</span>`) : html`<span class="muted">no tools</span>`}</span>
<span>${c.filesTouchedCount} file${c.filesTouchedCount === 1 ? '' : 's'}</span>
<span class="mono" title="${c.commitOid ?? ''}">commit ${shortOid(c.commitOid)}</span>
<span class="mono ${c.verified ? 'verified' : 'broken'}" title="${c.hash}">${c.verified ? '✓' : '✗'} ${c.hash.slice(0, 12)}</span>
${checkpointActions(runId, c.seq, c.commitOid !== null, actions)}</div>
${c.files.length ? html`<details><summary>files</summary><ul>${c.files.map(
    (f) => html`<li><code>${f.path}</code> <span class="muted mono">${f.deleted ? 'deleted' : (f.sha256 ?? '').slice(0, 12)}</span></li>`,
  )}</ul></details>` : ''}</li>`;
}
