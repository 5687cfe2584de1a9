// Cost is a query over the recorded usage (the checkpoint rows, and a run's final text-only answer)
// and the prices, never a counter: it cannot drift from the rows, and a price changed later
// re-prices the past. A record whose usage or model has no price is "unpriced" (cost null); a total
// over records holding one is null too, so an unpriced model never reads as free. Prices: the
// workspace's model_prices over the shipped table, applied by echodo_costed_usage (migration 022).
import type { PendingQuery, Row } from 'postgres';
import { SHIPPED_PRICES, type ModelPrice } from '../core/prices.ts';
import type { WorkspaceTx } from './workspace.ts';

export interface UsageTotals {
  inputTokens: number | null;
  outputTokens: number | null;
  cacheReadTokens: number | null;
  cacheWriteTokens: number | null;
  reasoningTokens: number | null;
}

export interface CostTotal extends UsageTotals {
  checkpoints: number;
  /** Null when any of the rows is unpriced (no usage reported, or no price for its model). */
  costUsd: number | null;
  unpricedCheckpoints: number;
  /** What the priced rows cost (a budget can count only these). */
  pricedUsd: number;
}

export interface CheckpointCost extends UsageTotals {
  seq: number;
  modelId: string | null;
  costUsd: number | null;
}

/**
 * The usage records matching `where` (checkpoint rows, and the run's final answer: checkpoint_seq null),
 * each with cost_usd (null: unpriced), priced by echodo_costed_usage: the one definition of a price.
 */
function costed(tx: WorkspaceTx, where: PendingQuery<Row[]>): PendingQuery<Row[]> {
  return tx`
    with costed as (
      select * from echodo_costed_usage(${tx.json(SHIPPED_PRICES as never)}) c
       where c.workspace_id = ${tx.workspaceId} and ${where}
    )`;
}

const totals = (tx: WorkspaceTx) => tx`
  count(checkpoint_seq)::int as checkpoints,
  case when count(*) filter (where cost_usd is null) > 0 then null else coalesce(sum(cost_usd), 0) end::float8 as cost_usd,
  count(*) filter (where cost_usd is null)::int as unpriced_checkpoints,
  coalesce(sum(cost_usd), 0)::float8 as priced_usd,
  sum(input_tokens)::float8 as input_tokens, sum(output_tokens)::float8 as output_tokens,
  sum(cache_read_tokens)::float8 as cache_read_tokens, sum(cache_write_tokens)::float8 as cache_write_tokens,
  sum(reasoning_tokens)::float8 as reasoning_tokens`;

function toTotal(r: Row | undefined): CostTotal {
  return {
    checkpoints: r?.checkpoints ?? 0,
    costUsd: r?.cost_usd ?? null,
    unpricedCheckpoints: r?.unpriced_checkpoints ?? 0,
    pricedUsd: r?.priced_usd ?? 0,
    inputTokens: r?.input_tokens ?? null,
    outputTokens: r?.output_tokens ?? null,
    cacheReadTokens: r?.cache_read_tokens ?? null,
    cacheWriteTokens: r?.cache_write_tokens ?? null,
    reasoningTokens: r?.reasoning_tokens ?? null,
  };
}

/** Checkpoints of a run (seqs from..to, default all) with their usage and cost, in seq order. */
export async function checkpointCosts(
  tx: WorkspaceTx,
  agentRunId: string,
  range: { from: number; to: number } = { from: 1, to: 2 ** 31 - 1 },
): Promise<CheckpointCost[]> {
  const where = tx`c.agent_run_id = ${agentRunId} and c.checkpoint_seq between ${range.from} and ${range.to}`;
  const rows = await tx`${costed(tx, where)}
    select checkpoint_seq, model_id, input_tokens::float8, output_tokens::float8, cache_read_tokens::float8,
           cache_write_tokens::float8, reasoning_tokens::float8, cost_usd::float8 from costed order by checkpoint_seq`;
  return rows.map((r) => ({ seq: r.checkpoint_seq, ...usageCostOf(r) }));
}

/** The usage and cost of the run's final text-only answer (kept on the run), or null when it has none. */
export async function finalAnswerCost(
  tx: WorkspaceTx,
  agentRunId: string,
): Promise<Omit<CheckpointCost, 'seq'> | null> {
  const [r] = await tx`${costed(tx, tx`c.agent_run_id = ${agentRunId} and c.checkpoint_seq is null`)}
    select model_id, input_tokens::float8, output_tokens::float8, cache_read_tokens::float8,
           cache_write_tokens::float8, reasoning_tokens::float8, cost_usd::float8 from costed`;
  return r ? usageCostOf(r) : null;
}

/** A costed usage row (the columns `costed` selects) as the API names it. */
function usageCostOf(r: Row): Omit<CheckpointCost, 'seq'> {
  return {
    modelId: r.model_id,
    costUsd: r.cost_usd,
    inputTokens: r.input_tokens,
    outputTokens: r.output_tokens,
    cacheReadTokens: r.cache_read_tokens,
    cacheWriteTokens: r.cache_write_tokens,
    reasoningTokens: r.reasoning_tokens,
  };
}

export async function runCost(tx: WorkspaceTx, agentRunId: string): Promise<CostTotal> {
  const [row] = await tx`${costed(tx, tx`c.agent_run_id = ${agentRunId}`)} select ${totals(tx)} from costed`;
  return toTotal(row);
}

export async function convoyCost(tx: WorkspaceTx, convoyId: string): Promise<CostTotal> {
  const [row] = await tx`${costed(tx, tx`c.convoy_id = ${convoyId}`)} select ${totals(tx)} from costed`;
  return toTotal(row);
}

/** The run's latest checkpoint: its priced cost and its tokens (input and output), the guess at the next one. */
export async function lastCheckpointSpend(
  tx: WorkspaceTx,
  agentRunId: string,
): Promise<{ usd: number; tokens: number }> {
  const [row] = await tx`${costed(
    tx,
    tx`c.agent_run_id = ${agentRunId} and c.checkpoint_seq = (
      select max(checkpoint_seq) from worker_checkpoints where workspace_id = ${tx.workspaceId}
         and agent_run_id = ${agentRunId})`,
  )}
    select coalesce(cost_usd, 0)::float8 as usd,
           (coalesce(input_tokens, 0) + coalesce(output_tokens, 0))::float8 as tokens from costed`;
  return { usd: row?.usd ?? 0, tokens: row?.tokens ?? 0 };
}

/**
 * The workspace's spend on one UTC day (`YYYY-MM-DD`, default today): what its daily cap is measured against.
 * The day's bounds are passed in as values: under row-level security only a comparison with a plain value
 * reaches the (workspace_id, occurred_at) index; bounds computed inside the query are applied after reading
 * every checkpoint of the workspace.
 */
export async function workspaceDayCost(tx: WorkspaceTx, day?: string): Promise<CostTotal> {
  const start = day ? new Date(`${day}T00:00:00Z`) : new Date(new Date().setUTCHours(0, 0, 0, 0));
  const end = new Date(start.getTime() + 86_400_000);
  const [row] = await tx`${costed(tx, tx`c.occurred_at >= ${start} and c.occurred_at < ${end}`)}
    select ${totals(tx)} from costed`;
  return toTotal(row);
}

/** The workspace's own prices. */
export async function listPrices(tx: WorkspaceTx): Promise<ModelPrice[]> {
  return tx<ModelPrice[]>`
    select model, input_per_mtok::float8 as "inputPerMtok", output_per_mtok::float8 as "outputPerMtok",
           cache_read_per_mtok::float8 as "cacheReadPerMtok", cache_write_per_mtok::float8 as "cacheWritePerMtok"
      from model_prices order by model`;
}

export async function setPrice(tx: WorkspaceTx, p: ModelPrice): Promise<void> {
  await tx`insert into model_prices (workspace_id, model, input_per_mtok, output_per_mtok, cache_read_per_mtok,
                                     cache_write_per_mtok)
           values (${tx.workspaceId}, ${p.model}, ${p.inputPerMtok}, ${p.outputPerMtok}, ${p.cacheReadPerMtok},
                   ${p.cacheWritePerMtok})
           on conflict (workspace_id, model) do update
             set input_per_mtok = excluded.input_per_mtok, output_per_mtok = excluded.output_per_mtok,
                 cache_read_per_mtok = excluded.cache_read_per_mtok, cache_write_per_mtok = excluded.cache_write_per_mtok,
                 updated_at = now()`;
}

export async function removePrice(tx: WorkspaceTx, model: string): Promise<boolean> {
  return (await tx`delete from model_prices where model = ${model} returning 1`).length > 0;
}

export async function setDailyBudget(tx: WorkspaceTx, dailyUsd: number): Promise<void> {
  await tx`insert into workspace_budgets (workspace_id, daily_usd) values (${tx.workspaceId}, ${dailyUsd})
           on conflict (workspace_id) do update set daily_usd = excluded.daily_usd, updated_at = now()`;
}
