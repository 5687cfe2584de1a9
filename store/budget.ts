// Budgets in Postgres: a run's limits live in its recorded job (maxCostUsd, maxTokens; a retry may
// replace them), a workspace's daily cap in workspace_budgets. What has been spent is always
// computed from the usage records (store/cost.ts), never kept as a counter.
import type { Job } from '../core/job.ts';
import type { RunRow } from './runs.ts';
import type { WorkspaceTx } from './workspace.ts';

/** The workspace's daily cap in USD, or null when it has none. */
export async function dailyBudget(tx: WorkspaceTx): Promise<number | null> {
  const [row] = await tx<{ daily_usd: number }[]>`select daily_usd::float8 as daily_usd from workspace_budgets`;
  return row?.daily_usd ?? null;
}

/** Tokens the run has used so far (input and output, as its usage records report them). */
export async function runTokens(tx: WorkspaceTx, agentRunId: string): Promise<number> {
  const [row] = await tx<{ n: number }[]>`
    select coalesce(sum(coalesce(input_tokens, 0) + coalesce(output_tokens, 0)), 0)::float8 as n
      from model_usage where workspace_id = ${tx.workspaceId} and agent_run_id = ${agentRunId}`;
  return row!.n;
}

/**
 * A re-dispatch's job naming budgets: they replace the recorded ones. Returns the updated run, or
 * undefined when the job names none (the recorded ones stay).
 */
export async function setRunLimits(tx: WorkspaceTx, run: RunRow, job: Job): Promise<RunRow | undefined> {
  if (job.maxCostUsd === undefined && job.maxTokens === undefined) return undefined;
  const limits: Record<string, number> = {};
  if (job.maxCostUsd !== undefined) limits.maxCostUsd = job.maxCostUsd;
  if (job.maxTokens !== undefined) limits.maxTokens = job.maxTokens;
  const [row] = await tx<RunRow[]>`
    update agent_runs set job = job || ${tx.json(limits)}
     where workspace_id = ${tx.workspaceId} and id = ${run.id} returning *`;
  return row;
}

/** The run stops at its last checkpoint: fenced on the lease like every end of a run. */
export async function exhaustRun(tx: WorkspaceTx, args: { agentRunId: string; leaseEpoch: number }): Promise<boolean> {
  const rows = await tx`
    update agent_runs set status = 'budget_exhausted', finished_at = now(), lease_expires_at = null
     where workspace_id = ${tx.workspaceId} and id = ${args.agentRunId} and lease_epoch = ${args.leaseEpoch}
       and status = 'running'
    returning 1`;
  return rows.length > 0;
}
