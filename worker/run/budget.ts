// The budget check before each round. The next round is guessed to cost what the last checkpoint
// did (a conversation only grows, so this guess is low rather than high): the run stops at its last
// checkpoint when what it (or its workspace today) has spent, plus that guess, would pass a limit.
// A guess that was too low lets one round cross the limit, never two. Spend is read from the rows.
import type { Job } from '../../core/job.ts';
import { dailyBudget, runTokens } from '../../store/budget.ts';
import { lastCheckpointSpend, runCost, workspaceDayCost } from '../../store/cost.ts';
import type { WorkspaceTx } from '../../store/workspace.ts';

export type BudgetLimit = 'maxCostUsd' | 'maxTokens' | 'dailyUsd';

/** Which limit was reached: its value, the amount spent against it, and the next round's guess. */
export interface BudgetExhausted {
  limit: BudgetLimit;
  limitValue: number;
  amount: number;
  nextRoundEstimate: number;
}

export interface BudgetGuard {
  /** Null while every limit has room for another round. */
  check(): Promise<BudgetExhausted | null>;
}

type Scoped = <T>(fn: (tx: WorkspaceTx) => Promise<T>) => Promise<T>;

const over = (limit: BudgetLimit, limitValue: number, amount: number, next: number): BudgetExhausted | null =>
  amount >= limitValue || amount + next > limitValue ? { limit, limitValue, amount, nextRoundEstimate: next } : null;

/**
 * The guard of a run, or undefined when neither the job nor the workspace has a limit (then
 * nothing is read per round). An unpriced spend counts what is priced: a cap cannot see the rest.
 */
export async function budgetGuard(scoped: Scoped, agentRunId: string, job: Job): Promise<BudgetGuard | undefined> {
  const daily = await scoped((tx) => dailyBudget(tx));
  const { maxCostUsd, maxTokens } = job;
  if (daily === null && maxCostUsd === undefined && maxTokens === undefined) return undefined;
  return {
    check: () =>
      scoped(async (tx) => {
        const last = await lastCheckpointSpend(tx, agentRunId);
        if (maxTokens !== undefined) {
          const hit = over('maxTokens', maxTokens, await runTokens(tx, agentRunId), last.tokens);
          if (hit) return hit;
        }
        if (maxCostUsd !== undefined) {
          const hit = over('maxCostUsd', maxCostUsd, (await runCost(tx, agentRunId)).pricedUsd, last.usd);
          if (hit) return hit;
        }
        if (daily !== null) return over('dailyUsd', daily, (await workspaceDayCost(tx)).pricedUsd, last.usd);
        return null;
      }),
  };
}
