// Tokens and cost on the run page: the run's totals and each checkpoint of the page shown. A cost
// that cannot be computed (no usage reported, or no price for the model) reads "unpriced", never 0.
import type { CheckpointCost, CostTotal, UsageTotals } from '../store/cost.ts';
import { html, type SafeHtml } from './html.ts';

/** The token columns' headers, in the order tokenCells fills them. */
const TOKEN_HEADERS = html`<th>Input</th>
  <th>Output</th>
  <th>Cache read</th>
  <th>Cache write</th>
  <th>Reasoning</th>`;

export function formatUsd(usd: number | null): string {
  if (usd === null) return 'unpriced';
  // Cents for dollars; three significant figures for the fractions of a cent a round often costs.
  return `$${usd >= 1 || usd === 0 ? usd.toFixed(2) : Number(usd.toPrecision(3)).toString()}`;
}

/** A token count as the panel writes it; null: not reported. */
export const formatTokens = (n: number | null) => (n === null ? '—' : n.toLocaleString('en-US'));
const count = formatTokens;

function tokenCells(u: UsageTotals): SafeHtml {
  return html`<td class="num">${count(u.inputTokens)}</td>
    <td class="num">${count(u.outputTokens)}</td>
    <td class="num">${count(u.cacheReadTokens)}</td>
    <td class="num">${count(u.cacheWriteTokens)}</td>
    <td class="num">${count(u.reasoningTokens)}</td>`;
}

/** `final`: the run's last answer, text only, which no checkpoint holds (kept on the run, counted in the total). */
export function runUsageContent(
  total: CostTotal,
  checkpoints: CheckpointCost[],
  final: Omit<CheckpointCost, 'seq'> | null = null,
): SafeHtml {
  const finalRow =
    final &&
    html`<tr data-usage-final>
      <td>final answer</td>
      <td class="mono">${final.modelId ?? '—'}</td>
      ${tokenCells(final)}
      <td class="num" data-cost>${formatUsd(final.costUsd)}</td>
    </tr>`;
  const rows = checkpoints.map(
    (c) =>
      html`<tr data-usage-seq="${c.seq}">
        <td>${c.seq}</td>
        <td class="mono">${c.modelId ?? '—'}</td>
        ${tokenCells(c)}
        <td class="num" data-cost>${formatUsd(c.costUsd)}</td>
      </tr>`,
  );
  return html`<section data-run-usage>
    <h2>Tokens and cost</h2>
    <table>
      <thead>
        <tr>
          <th>Checkpoint</th>
          <th>Model</th>
          ${TOKEN_HEADERS}
          <th>Cost</th>
        </tr>
      </thead>
      <tbody>
        ${finalRow}${rows}
      </tbody>
      <tfoot>
        <tr data-usage-total>
          <th>Total</th>
          <th>${total.checkpoints} checkpoint(s)${final ? ' and the final answer' : ''}</th>
          ${tokenCells(total)}
          <th class="num" data-cost>${formatUsd(total.costUsd)}</th>
        </tr>
      </tfoot>
    </table>
  </section>`;
}

/** A convoy's tokens and cost, over every run of it. */
export function convoyUsageContent(total: CostTotal): SafeHtml {
  return html`<section data-convoy-usage>
    <h2>Tokens and cost</h2>
    <table>
      <thead>
        <tr>
          <th>Checkpoints</th>
          ${TOKEN_HEADERS}
          <th>Cost</th>
        </tr>
      </thead>
      <tbody>
        <tr>
          <td>${total.checkpoints}</td>
          ${tokenCells(total)}
          <td class="num" data-cost>${formatUsd(total.costUsd)}</td>
        </tr>
      </tbody>
    </table>
  </section>`;
}

/** The workspace's spend today (UTC), priced rows only, against its daily cap when it has one. */
export function spendTodayContent(today: CostTotal, cap: number | null): SafeHtml {
  const unpriced = today.unpricedCheckpoints ? html` (and ${today.unpricedCheckpoints} unpriced checkpoint(s))` : '';
  const against = cap === null ? 'no daily cap' : html`of a daily cap of ${formatUsd(cap)}`;
  return html`<p class="muted" data-spend-today>
    Spent today: <strong>${formatUsd(today.pricedUsd)}</strong>${unpriced}, ${against}.
  </p>`;
}
