// The Storage page: the workspace's bytes in Postgres and git, its largest runs and convoys
// first, and the retention policy and quota the stall detector's sweep applies.
import type { RetentionPreview } from '../store/retention.ts';
import type { RunBytes, StoragePolicy } from '../store/storage.ts';
import { html, statusBadge, timeCell, type SafeHtml } from './html.ts';

export interface StorageView {
  workspaceId: string;
  postgres: { checkpoints: number; events: number; runs: number; total: number };
  /** Git bytes, null (unknown) when none of the branches exists any more (pruned or deleted). */
  runs: (RunBytes & { gitBytes: number | null })[];
  convoys: { convoyId: string; checkpointRows: number; bytes: number; gitBytes: number | null }[];
  /** The runs' git bytes added up, those unknown left out; null when every one is unknown. */
  gitBytes: number | null;
  policy: StoragePolicy;
  /** What the policy would prune now (a dry run); absent without a retention policy. */
  preview?: RetentionPreview;
}

function pruneNow(preview: RetentionPreview | undefined, csrf: string | undefined): SafeHtml {
  if (!preview) return html``;
  const what = html`<span data-testid="prune-preview" data-rows="${preview.rows}" data-bytes="${preview.bytes}"
    >${preview.rows} checkpoints of ${preview.runs} runs (${formatBytes(preview.bytes)})</span
  >`;
  return html`<p>
    The policy would prune ${what}
    now.${
      csrf && preview.rows
        ? html` <form class="action" method="post" action="/storage/prune">
            <input type="hidden" name="_csrf" value="${csrf}" />
            <button type="submit" data-testid="prune-now">Prune now</button>
          </form>`
        : ''
    }
  </p>`;
}

const enc = encodeURIComponent;

export function formatBytes(bytes: number | null): string {
  if (bytes === null) return '—';
  if (bytes < 1024) return `${bytes} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${value.toFixed(value < 10 ? 1 : 0)} ${units[unit]}`;
}

function policyCard(p: StoragePolicy): SafeHtml {
  const retention =
    p.keepLast === null
      ? 'none (every checkpoint kept)'
      : `keep the last ${p.keepLast} of runs finished ${p.keepDays ?? 0} days ago`;
  const over = p.quotaBytes !== null && p.usedBytes !== null && p.usedBytes > p.quotaBytes;
  return html`<div class="card">
    <div class="label">Policy</div>
    <div data-testid="storage-retention">retention: ${retention}</div>
    <div data-testid="storage-quota">
      quota:
      ${p.quotaBytes === null ? 'none' : formatBytes(p.quotaBytes)}${
        over ? html` <span class="badge stalled" data-testid="over-quota">over quota: no run starts</span>` : ''
      }
    </div>
    <div data-testid="storage-used" data-bytes="${p.usedBytes ?? ''}" data-git-bytes="${p.gitBytes ?? ''}">
      used: ${formatBytes(p.usedBytes)}${p.gitBytes === null ? '' : ` (git ${formatBytes(p.gitBytes)})`}
    </div>
    <div class="muted">
      last measured ${timeCell(p.measuredAt)} · set with <code>npm run workspace -- retention set</code> /
      <code>quota set</code>
    </div>
  </div>`;
}

/** A git figure: `—` when unknown (the branches are gone), never a false 0. */
function gitCell(bytes: number | null): SafeHtml {
  return html`<td
    class="num"
    data-field="gitBytes"
    data-bytes="${bytes ?? ''}"
    ${bytes === null ? html` title="unknown: the branch is gone (pruned or deleted)"` : ''}
  >
    ${formatBytes(bytes)}
  </td>`;
}

/** `csrf`: the viewer may prune (absent for a read-only token). */
export function storageContent(v: StorageView, csrf?: string): SafeHtml {
  const runs = v.runs.map(
    (r) =>
      html`<tr data-run-id="${r.agentRunId}">
        <td class="run">
          <a href="/runs/${enc(r.agentRunId)}"><strong>${r.briefId}</strong></a>
          <div class="muted mono">run ${r.agentRunId.slice(0, 8)}</div>
        </td>
        <td>${statusBadge(r.status)}</td>
        <td><a href="/convoys/${enc(r.convoyId)}">${r.convoyId}</a></td>
        <td class="num">${r.checkpointRows}</td>
        <td class="num" data-field="postgresBytes" data-bytes="${r.postgresBytes}">${formatBytes(r.postgresBytes)}</td>
        ${gitCell(r.gitBytes)}
      </tr>`,
  );
  const convoys = v.convoys.map(
    (c) =>
      html`<tr data-convoy-id="${c.convoyId}">
        <td><a href="/convoys/${enc(c.convoyId)}">${c.convoyId}</a></td>
        <td class="num">${c.checkpointRows}</td>
        <td class="num" data-field="postgresBytes" data-bytes="${c.bytes}">${formatBytes(c.bytes)}</td>
        ${gitCell(c.gitBytes)}
      </tr>`,
  );
  return html`<nav class="crumbs"><a href="/">Convoys</a> / storage</nav>
    <h1>Storage</h1>
    <section class="cards">
      <div class="card primary">
        <div class="label">Postgres</div>
        <div class="value small" data-testid="storage-postgres" data-bytes="${v.postgres.total}">
          ${formatBytes(v.postgres.total)}
        </div>
        <div class="muted">
          checkpoints ${formatBytes(v.postgres.checkpoints)} · events ${formatBytes(v.postgres.events)} · runs
          ${formatBytes(v.postgres.runs)}
        </div>
      </div>
      <div class="card primary">
        <div class="label">Git (runs below)</div>
        <div class="value small" data-testid="storage-git" data-bytes="${v.gitBytes ?? ''}">
          ${formatBytes(v.gitBytes)}
        </div>
        <div class="muted">objects reachable only from each run's branch (— : its branch is gone)</div>
      </div>
      ${policyCard(v.policy)}
    </section>
    ${pruneNow(v.preview, csrf)}
    <h2>Largest runs</h2>
    ${
      v.runs.length
        ? html`<table data-testid="storage-runs">
            <thead>
              <tr>
                <th>Run</th>
                <th>Status</th>
                <th>Convoy</th>
                <th>Checkpoints</th>
                <th>Postgres</th>
                <th>Git</th>
              </tr>
            </thead>
            <tbody>
              ${runs}
            </tbody>
          </table>`
        : html`<div class="empty">No runs yet.</div>`
    }
    <h2>Convoys</h2>
    ${
      v.convoys.length
        ? html`<table data-testid="storage-convoys">
            <thead>
              <tr>
                <th>Convoy</th>
                <th>Checkpoints</th>
                <th>Postgres</th>
                <th>Git</th>
              </tr>
            </thead>
            <tbody>
              ${convoys}
            </tbody>
          </table>`
        : html`<div class="empty">No checkpoints yet.</div>`
    }`;
}
