// Aggregates across workspaces for mission control's /metrics and fleet page, through the SECURITY DEFINER
// functions of migrations 016 and 022 (counts and sums only, never a row). One query per function.
import type { Sql } from 'postgres';
import { SHIPPED_PRICES } from '../core/prices.ts';

export async function fleetRunCounts(sql: Sql): Promise<{ workspace_id: string; status: string; runs: number }[]> {
  return sql`select workspace_id, status, runs::float8 as runs from echodo_fleet_run_counts()`;
}

export async function fleetQueue(sql: Sql): Promise<{ depth: number; oldest_age_s: number }> {
  const [row] = await sql<{ depth: number; oldest_age_s: number }[]>`
    select depth::float8 as depth, oldest_age_s from echodo_fleet_queue()`;
  return row ?? { depth: 0, oldest_age_s: 0 };
}

export interface FleetTokens {
  workspace_id: string;
  model_id: string;
  input: number | null;
  output: number | null;
  cache_read: number | null;
  cache_write: number | null;
  reasoning: number | null;
}

export async function fleetTokens(sql: Sql): Promise<FleetTokens[]> {
  return sql<FleetTokens[]>`
    select workspace_id, model_id, input::float8, output::float8, cache_read::float8, cache_write::float8,
           reasoning::float8 from echodo_fleet_tokens()`;
}

/** Priced cost (USD) and unpriced checkpoints by workspace and model. */
export async function fleetCost(
  sql: Sql,
): Promise<{ workspace_id: string; model_id: string; cost_usd: number; unpriced: number }[]> {
  return sql`select workspace_id, model_id, cost_usd, unpriced::float8 as unpriced
               from echodo_fleet_cost(${sql.json(SHIPPED_PRICES as never)})`;
}

/** Runs the stall detector re-dispatched or re-enqueued, by workspace, counted from their events. */
export async function fleetStallSweeps(sql: Sql): Promise<{ workspace_id: string; kind: string; runs: number }[]> {
  return sql`select workspace_id, kind, runs::float8 as runs from echodo_fleet_stall_sweeps()`;
}

export interface FleetSpend {
  workspace_id: string;
  tokens: number;
  cost_usd: number;
  unpriced: number;
  daily_usd: number | null;
  budget_exhausted: number;
}

/** Each workspace's spend today (UTC): tokens, priced cost, unpriced records, its cap, runs a budget stopped. */
export async function fleetSpendToday(sql: Sql): Promise<FleetSpend[]> {
  return sql<FleetSpend[]>`
    select workspace_id, tokens::float8, cost_usd, unpriced::float8, daily_usd, budget_exhausted::float8
      from echodo_fleet_spend(${sql.json(SHIPPED_PRICES as never)}, (now() at time zone 'utc')::date at time zone 'utc')
     order by workspace_id`;
}
