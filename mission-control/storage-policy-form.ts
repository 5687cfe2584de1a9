// Settings → Storage: the workspace's retention policy and quota as a form, the same values
// `npm run workspace -- retention set` and `quota set` write. An empty field clears its rule.
import { byteSize, wholeNumber } from '../operator/storage-input.ts';
import type { StoragePolicy } from '../store/storage.ts';
import { html, type SafeHtml } from './html.ts';
import type { ActionView } from './pages-actions.ts';
import { formatBytes } from './pages-storage.ts';

export interface StoragePolicyInput {
  keepLast: number | null;
  keepDays: number | null;
  quotaBytes: number | null;
}

export function storagePolicyInput(form: Record<string, unknown>): StoragePolicyInput {
  return {
    keepLast: wholeNumber(form.keepLast, 'keep the last', 1),
    keepDays: wholeNumber(form.keepDays, 'finished days ago', 0),
    quotaBytes: byteSize(form.quota, 'quota'),
  };
}

const num = (v: number | null) => (v === null ? '' : String(v));

/** The section of the Settings page; the form only for a viewer who may write. */
export function storagePolicySection(p: StoragePolicy, view: ActionView | undefined): SafeHtml {
  const retention =
    p.keepLast === null
      ? 'none: every checkpoint is kept'
      : `a run finished ${p.keepDays ?? 0} days ago keeps its last ${p.keepLast} checkpoints`;
  const summary = html`<p data-testid="settings-storage">
    Retention: <span data-testid="settings-retention">${retention}</span> · Quota:
    <span data-testid="settings-quota">${p.quotaBytes === null ? 'none' : formatBytes(p.quotaBytes)}</span>
    · <a href="/storage">Storage</a>
  </p>`;
  if (!view)
    return html`<h2>Storage</h2>
      ${summary}`;
  return html`<h2>Storage</h2>
    ${summary}
    <form class="action" method="post" action="/settings/storage" data-testid="storage-policy-form">
      <input type="hidden" name="_csrf" value="${view.csrf}" />
      <label class="field"
        ><span>Keep the last K checkpoints of a finished run</span
        ><input name="keepLast" inputmode="numeric" value="${num(p.keepLast)}"
      /></label>
      <label class="field"
        ><span>…once it finished D days ago</span><input name="keepDays" inputmode="numeric" value="${num(p.keepDays)}"
      /></label>
      <label class="field"
        ><span>Quota (bytes; 500M, 20G)</span><input name="quota" value="${num(p.quotaBytes)}"
      /></label>
      <button type="submit" data-testid="save-storage-policy">Save storage policy</button>
    </form>
    <p class="muted">
      Empty fields clear their rule. The stall detector's storage sweep applies the retention; over the quota, no new
      run of this workspace starts until a prune brings it under.
    </p>`;
}
