// Aggregates across workspaces for mission control's /metrics, through the SECURITY DEFINER
// functions of migration 016 (counts and sums only, never a row). One query per function.
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
