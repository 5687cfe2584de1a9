// A run stopped by its token budget, then retried with room to finish: the shape the metrics and
// tracing tests need (a round stopped, a resume, a completion), from a transcript whose first two
// rounds use 110 then 210 tokens.
import { retryRun } from '../../operator/dispatch.ts';
import { waitFor } from './child.ts';
import type { Scenario } from './scenario.ts';

/** Dispatches with maxTokens 250 (the third round would pass it), waits for budget_exhausted, retries, waits for completed. */
export async function runStoppedByBudgetThenRetried(s: Scenario): Promise<string> {
  const { agentRunId } = await s.dispatch({ maxTokens: 250 });
  await s.waitForStatus(agentRunId, 'budget_exhausted', 40_000);
  await retryRun(s.t.db, s.queue, { workspaceId: s.workspaceId, agentRunId, maxTokens: 10_000 });
  await waitFor(async () => ((await s.run(agentRunId)).status === 'completed' ? true : undefined), {
    timeoutMs: 40_000,
    what: 'the run to complete',
  });
  return agentRunId;
}
