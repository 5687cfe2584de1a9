// npm run retry: re-dispatches a run from its last checkpoint (the description below is its --help).
import { retryRun } from '../operator/dispatch.ts';
import { noteProblem, sendBackRun } from '../operator/publish.ts';
import { createQueue } from '../worker/queue/index.ts';
import { runActionCommand } from './run-action.ts';

const AMOUNT = /^[0-9]{1,12}(\.[0-9]{1,9})?$/;
const WHOLE = /^[0-9]{1,15}$/;

const spec = {
  name: 'retry',
  summary:
    're-dispatches a failed, stalled, released or budget_exhausted run (attempt + 1, resumed from its last ' +
    'checkpoint), through the same decision as `dispatch` of a job naming the run. --max-cost-usd and ' +
    "--max-tokens replace the run's budgets. --note sends a doc-writer run in review (brief doc_review) back: " +
    'the note is appended to its brief and the run is retried to work on it. Prints {"jobId","agentRunId","outcome"}.',
  refused: 'refused: the run is running, completed or cancelled; with --note: its brief is not in doc_review',
  usage: '-- --workspace W --run R [--max-cost-usd N] [--max-tokens N] [--note TEXT]',
  flags: {
    'max-cost-usd': { type: 'string' as const, value: 'N', help: "the run's new cost budget in USD" },
    'max-tokens': { type: 'string' as const, value: 'N', help: "the run's new token budget (input + output)" },
    note: { type: 'string' as const, value: 'TEXT', help: "send back from review: appended to the run's brief" },
  },
  check: (values: Record<string, unknown>) => {
    const cost = values['max-cost-usd'];
    const tokens = values['max-tokens'];
    if (cost !== undefined && !AMOUNT.test(String(cost))) return '--max-cost-usd must be an amount >= 0 (e.g. 2.5)';
    if (tokens !== undefined && !WHOLE.test(String(tokens))) return '--max-tokens must be a whole number >= 0';
    const problem = values.note === undefined ? undefined : noteProblem(values.note);
    return problem && `--note: ${problem}`;
  },
};
await runActionCommand(spec, async ({ config, db, workspaceId, agentRunId, values }) => {
  const queue = createQueue({ config, db, workerId: `retry-${process.pid}` });
  const cost = values['max-cost-usd'];
  const tokens = values['max-tokens'];
  const limits = {
    ...(cost === undefined ? {} : { maxCostUsd: Number(cost) }),
    ...(tokens === undefined ? {} : { maxTokens: Number(tokens) }),
  };
  const note = values.note;
  try {
    if (typeof note === 'string')
      return await sendBackRun(db, queue, { workspaceId, agentRunId, note, by: 'cli', ...limits });
    return await retryRun(db, queue, { workspaceId, agentRunId, ...limits });
  } finally {
    await queue.close();
  }
});
