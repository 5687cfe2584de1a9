// npm run cancel: cancels a run (the description below is its --help).
import { requestCancel } from '../operator/cancel.ts';
import { createLogger } from '../worker/log.ts';
import { runActionCommand } from './run-action.ts';

const spec = {
  name: 'cancel',
  summary:
    'cancels a run: at once when nobody is working on it (queued, or its worker dead), else its worker stops at ' +
    'the next tool boundary. Prints {"agentRunId","status","immediate",…}.',
  refused: 'refused: the run has already finished',
};
await runActionCommand(spec, ({ config, db, workspaceId, agentRunId }) =>
  requestCancel(db, workspaceId, agentRunId, 'cli', {
    repoRoot: config.WORKER_REPO_ROOT,
    log: createLogger({ level: 'warn', name: 'cancel' }),
  }),
);
