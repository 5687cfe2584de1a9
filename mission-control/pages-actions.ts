// The panel's operator actions and the diff view. Every action is a plain form POST (no script
// needed) carrying the session's CSRF token; the server answers with a redirect. A read-only
// token gets no forms at all (and 403 if it posts anyway).
import type { CheckpointDiff } from './checkpoint-diff.ts';
import type { ForkPreview } from './fork-preview.ts';
import { html, shortOid, type SafeHtml } from './html.ts';

/** What the page may offer: absent when the viewer may not act (read-only token, bearer page). */
export interface ActionView {
  csrf: string;
}

const enc = encodeURIComponent;

function actionForm(
  runId: string,
  action: 'fork' | 'retry' | 'cancel',
  view: ActionView,
  label: string,
  fields: SafeHtml | string = '',
  testid: string = action,
): SafeHtml {
  return html`<form class="action" method="post" action="/runs/${enc(runId)}/actions/${action}">
    <input type="hidden" name="_csrf" value="${view.csrf}" />${fields}<button type="submit" data-testid="${testid}">
      ${label}
    </button>
  </form>`;
}

/** A run that Cancel applies to, and Rewind: still queued or running. */
export const isCancellable = (status: string) => status === 'queued' || status === 'running';

/** Retry (a failed, stalled or budget_exhausted run) and Cancel (a queued or running one), where they apply. */
export function runActions(
  run: { agentRunId: string; status: string; stalled?: boolean },
  view: ActionView | undefined,
): SafeHtml {
  if (!view) return html``;
  const canCancel = isCancellable(run.status);
  const canRetry =
    run.status === 'failed' || run.status === 'budget_exhausted' || (run.status === 'running' && run.stalled === true);
  if (!canCancel && !canRetry) return html``;
  return html`<div class="actions" data-testid="run-actions">
    ${canRetry ? actionForm(run.agentRunId, 'retry', view, 'Retry', '', 'retry') : ''}${
      canCancel ? actionForm(run.agentRunId, 'cancel', view, 'Cancel', '', 'cancel') : ''
    }
  </div>`;
}

/**
 * Per checkpoint: the diff link for everyone; "Fork from here" for a viewer who may act, and while
 * the run is queued or running "Rewind here" (a fork that cancels the source). Both confirm with
 * the fork's preview first.
 */
export function checkpointActions(
  runId: string,
  seq: number,
  hasCommit: boolean,
  view: ActionView | undefined,
  rewindable = false,
): SafeHtml {
  const diff = hasCommit
    ? html`<a href="/runs/${enc(runId)}/checkpoints/${seq}" data-testid="diff-${seq}">diff</a>`
    : '';
  const fork =
    view && hasCommit
      ? actionForm(
          runId,
          'fork',
          view,
          'Fork from here',
          html`<input type="hidden" name="at" value="${seq}" />`,
          `fork-${seq}`,
        )
      : '';
  const rewind =
    view && hasCommit && rewindable
      ? actionForm(
          runId,
          'fork',
          view,
          'Rewind here',
          html`<input type="hidden" name="at" value="${seq}" /><input
              type="hidden"
              name="cancelSource"
              value="true"
            />`,
          `rewind-${seq}`,
        )
      : '';
  return html`<span class="cp-actions">${diff}${fork}${rewind}</span>`;
}

/** Where a diff page sits: its run's convoy (for the breadcrumb) and the run's newest seq (for "next"). */
export interface DiffPlace {
  convoyId: string;
  lastSeq: number;
}

function diffNav(d: CheckpointDiff, place: DiffPlace): SafeHtml {
  const at = (seq: number) => `/runs/${enc(d.agentRunId)}/checkpoints/${seq}`;
  return html`<nav class="pager">
    ${d.seq > 1 ? html`<a href="${at(d.seq - 1)}" data-testid="diff-prev">← checkpoint ${d.seq - 1}</a>` : ''}${
      d.seq < place.lastSeq
        ? html`<a href="${at(d.seq + 1)}" data-testid="diff-next">checkpoint ${d.seq + 1} →</a>`
        : ''
    }
  </nav>`;
}

export function diffPageContent(d: CheckpointDiff, place?: DiffPlace): SafeHtml {
  const files = d.files.map(
    (f) =>
      html`<li class="diff-file" data-path="${f.path}">
        <div class="row">
          <code>${f.path}</code>${
            f.binary
              ? html`<span class="muted">binary file: not shown</span>`
              : html`<span class="plus">+${f.added}</span><span class="minus">−${f.deleted}</span>`
          }${f.truncated ? html`<span class="badge stalled" data-testid="truncated">truncated</span>` : ''}
        </div>
        ${
          f.diff
            ? html`<pre class="diff">
${f.diff.split('\n').map((line) => html`<span class="${lineClass(line)}">${line} </span>`)}</pre>`
            : ''
        }
      </li>`,
  );
  const calls = d.toolCalls.map(
    (call) =>
      html`<li>
        <span class="chip">${call.tool}</span><span class="muted">round ${call.round}</span> ${
          call.ok ? '' : html`<span class="broken">error</span>`
        }
        <pre class="args">${JSON.stringify(call.input, null, 2)}</pre>
        ${call.error ? html`<div class="muted">${call.error}</div>` : ''}
      </li>`,
  );
  const convoy = place ? html`<a href="/convoys/${enc(place.convoyId)}">${place.convoyId}</a> / ` : '';
  return html`<nav class="crumbs" data-testid="crumbs">
      <a href="/">Convoys</a> / ${convoy}<a href="/runs/${enc(d.agentRunId)}">run ${d.agentRunId}</a> / checkpoint
      ${d.seq}
    </nav>
    ${place ? diffNav(d, place) : ''}
    <h1>
      Checkpoint ${d.seq}<span class="sub mono"
        >step ${d.step} · commit ${shortOid(d.commitOid, 12)} · since ${shortOid(d.parentOid, 12)}</span
      >
    </h1>
    ${d.truncated ? html`<div class="error" data-testid="diff-truncated">truncated: the diff is larger than ${Math.round(d.limitBytes / 1024)} KiB; the rest is in git (git diff ${shortOid(d.parentOid, 12)} ${shortOid(d.commitOid, 12)})</div>` : ''}
    <h2>Files changed (${d.files.length})</h2>
    ${
      d.files.length
        ? html`<ul class="diff-files" data-testid="diff-files">
            ${files}
          </ul>`
        : html`<div class="empty">No file changed in this checkpoint.</div>`
    }
    <h2>Tool calls of this round</h2>
    ${
      d.toolCalls.length
        ? html`<ul class="calls" data-testid="tool-calls">
            ${calls}
          </ul>`
        : html`<div class="empty">No tool calls recorded.</div>`
    }`;
}

function lineClass(line: string): string {
  if (line.startsWith('+++') || line.startsWith('---') || line.startsWith('diff ') || line.startsWith('index '))
    return 'meta';
  if (line.startsWith('+')) return 'add';
  if (line.startsWith('-')) return 'del';
  if (line.startsWith('@@')) return 'hunk';
  return '';
}

/** The files a fork at N starts without (a rewind leaves them behind), and that the source branch stays. */
export function forkPreviewContent(p: ForkPreview, rewind: boolean): SafeHtml {
  const files =
    p.files === null
      ? html`<div class="muted">The files that differ could not be read from git.</div>`
      : p.files.length
        ? html`<ul class="diff-files" data-testid="fork-preview-files">
            ${p.files.map((f) => html`<li><span class="mono">${f.status}</span> <code>${f.path}</code></li>`)}
          </ul>`
        : html`<div class="muted" data-testid="fork-preview-files">
            No file differs: checkpoint ${p.seq} is the tip.
          </div>`;
  return html`<div data-testid="fork-preview">
    <p>
      Files that differ between checkpoint ${p.seq} and the newest, checkpoint ${p.tipSeq} (the new run starts without
      these changes${rewind ? '; the rewind discards them' : ''}):
    </p>
    ${files}
    <p data-testid="fork-preview-branch">
      The source branch <code>${p.branch ?? '—'}</code> is kept${rewind ? ', and the source run is cancelled' : ''}.
    </p>
  </div>`;
}
