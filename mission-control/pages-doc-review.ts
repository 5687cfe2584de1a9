// A doc-writer run's review on its page: what it wrote has no commit to diff, so the page lists the
// files (its manifest) with their sha256, and the brief's review state. While the brief is in
// doc_review, a viewer who may act gets Publish and Send back (with a note for the writer); both
// are plain form POSTs answered first by a confirmation (confirm.ts), as Cancel is.
import { MAX_NOTE_CHARS } from '../operator/publish.ts';
import type { ReviewFile, RunBrief } from '../store/doc-review.ts';
import { html, statusBadge, timeCell, type SafeHtml } from './html.ts';
import type { ActionView } from './pages-actions.ts';

export interface DocReviewView {
  brief: RunBrief;
  files: ReviewFile[];
  /** How many files the manifest holds (more than `files` when cut). */
  total: number;
}

const enc = encodeURIComponent;

/** The files as a list: path and full sha256 (or "deleted"). */
export function reviewFilesList(files: ReviewFile[], total: number, testid = 'doc-files'): SafeHtml {
  if (!files.length) return html`<div class="empty" data-testid="${testid}">No files written.</div>`;
  return html`<table data-testid="${testid}">
      <thead>
        <tr>
          <th>file</th>
          <th>sha256</th>
        </tr>
      </thead>
      <tbody>
        ${files.map(
          (f) =>
            html`<tr data-path="${f.path}">
              <td><code>${f.path}</code></td>
              <td class="mono wrap">${f.sha256 ?? html`<span class="muted">deleted</span>`}</td>
            </tr>`,
        )}
      </tbody>
    </table>
    ${total > files.length ? html`<div class="muted">and ${total - files.length} more files</div>` : ''}`;
}

function reviewActions(runId: string, view: ActionView): SafeHtml {
  const at = (action: string) => `/runs/${enc(runId)}/actions/${action}`;
  return html`<div class="actions" data-testid="doc-review-actions">
    <form class="action" method="post" action="${at('publish')}">
      <input type="hidden" name="_csrf" value="${view.csrf}" /><button type="submit" data-testid="publish">
        Publish
      </button>
    </form>
    <form class="action send-back" method="post" action="${at('send-back')}">
      <input type="hidden" name="_csrf" value="${view.csrf}" />
      <label class="field"
        >Note for the writer<textarea
          name="note"
          rows="3"
          required
          maxlength="${String(MAX_NOTE_CHARS)}"
          data-testid="send-back-note"
        ></textarea></label
      ><button type="submit" data-testid="send-back">Send back</button>
    </form>
  </div>`;
}

/** The section under the run's facts; `view` absent: the viewer may not act (no forms). */
export function docReviewContent(runId: string, review: DocReviewView, view?: ActionView): SafeHtml {
  const { brief } = review;
  return html`<section class="doc-review" data-testid="doc-review">
    <h2>
      Files written <span class="muted">brief ${brief.briefId}</span>
      <span data-testid="brief-status">${statusBadge(brief.status, 'briefStatus')}</span>
    </h2>
    ${reviewFilesList(review.files, review.total)}
    ${
      brief.status === 'published'
        ? html`<div class="muted">published ${timeCell(brief.publishedAt)} by ${brief.publishedBy ?? '—'}</div>`
        : ''
    }
    ${brief.status === 'doc_review' && view ? reviewActions(runId, view) : ''}
  </section>`;
}
