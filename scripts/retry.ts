// npm run retry: re-dispatches a run from its last checkpoint (the description below is its --help).
import { retryRun } from '../operator/dispatch.ts';
import { createQueue } from '../worker/queue/index.ts';
import { runActionCommand } from './run-action.ts';

const spec = {
  name: 'retry',
  summary:
    're-dispatches a failed or stalled run (attempt + 1, resumed from its last checkpoint), through the same ' +
    'decision as `dispatch` of a job naming the run. Prints {"jobId","agentRunId","outcome"}.',
  refused: 'refused: the run is running, completed or cancelled',
};
await runActionCommand(spec, async ({ config, db, workspaceId, agentRunId }) => {
  const queue = createQueue({ config, db, workerId: `retry-${process.pid}` });
  try {
    return await retryRun(db, queue, { workspaceId, agentRunId });
  } finally {
    await queue.close();
  }
});
