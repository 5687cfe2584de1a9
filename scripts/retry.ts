// npm run retry: re-dispatches a run from its last checkpoint (the description below is its --help).
import { retryRun } from '../operator/dispatch.ts';
import { createQueue } from '../worker/queue/index.ts';
import { runActionCommand } from './run-action.ts';

const AMOUNT = /^[0-9]{1,12}(\.[0-9]{1,9})?$/;
const WHOLE = /^[0-9]{1,15}$/;

const spec = {
  name: 'retry',
  summary:
    're-dispatches a failed, stalled, released or budget_exhausted run (attempt + 1, resumed from its last ' +
    'checkpoint), through the same decision as `dispatch` of a job naming the run. --max-cost-usd and ' +
    '--max-tokens replace the run\'s budgets. Prints {"jobId","agentRunId","outcome"}.',
  refused: 'refused: the run is running, completed or cancelled',
  usage: '-- --workspace W --run R [--max-cost-usd N] [--max-tokens N]',
  flags: {
    'max-cost-usd': { type: 'string' as const, value: 'N', help: "the run's new cost budget in USD" },
    'max-tokens': { type: 'string' as const, value: 'N', help: "the run's new token budget (input + output)" },
  },
  check: (values: Record<string, unknown>) => {
    const cost = values['max-cost-usd'];
    const tokens = values['max-tokens'];
    if (cost !== undefined && !AMOUNT.test(String(cost))) return '--max-cost-usd must be an amount >= 0 (e.g. 2.5)';
    if (tokens !== undefined && !WHOLE.test(String(tokens))) return '--max-tokens must be a whole number >= 0';
    return undefined;
  },
};
await runActionCommand(spec, async ({ config, db, workspaceId, agentRunId, values }) => {
  const queue = createQueue({ config, db, workerId: `retry-${process.pid}` });
  const cost = values['max-cost-usd'];
  const tokens = values['max-tokens'];
  try {
    return await retryRun(db, queue, {
      workspaceId,
      agentRunId,
      ...(cost === undefined ? {} : { maxCostUsd: Number(cost) }),
      ...(tokens === undefined ? {} : { maxTokens: Number(tokens) }),
    });
  } finally {
    await queue.close();
  }
});
