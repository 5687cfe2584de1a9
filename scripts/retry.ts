// npm run retry -- --workspace W --run R
// Re-dispatches a failed or stalled run (attempt + 1, resumed from its last checkpoint), through
// the same decision as `dispatch` of a job naming the run. Prints {"jobId","agentRunId","outcome"}.
// Exit 0 ok; 2 bad arguments or no such run in that workspace; 3 refused (running, completed, cancelled).
import { loadConfigOrExit } from '../core/config.ts';
import { openDatabase } from '../store/connection.ts';
import { registerConfigSecrets, registerStartupSecrets } from '../worker/secrets.ts';
import { retryRun } from '../worker/dispatch.ts';
import { EchodoError, errorMessage } from '../core/errors.ts';
import { createQueue } from '../worker/queue/index.ts';
import { exitOnStartupError, parseCli, usageError } from './cli.ts';

exitOnStartupError('retry');

const USAGE = 'npm run retry -- --workspace W --run R';
const { values, positionals } = parseCli({ workspace: { type: 'string' }, run: { type: 'string' } }, USAGE);
if (positionals.length) usageError(USAGE, `unexpected argument(s): ${positionals.join(' ')}`);
if (!values.workspace || !values.run) usageError(USAGE, 'both --workspace and --run are required');

const config = loadConfigOrExit();
registerConfigSecrets(config); // before anything is logged or stored
const db = await openDatabase(config);
await registerStartupSecrets(config, db);
const queue = createQueue({ config, db, workerId: `retry-${process.pid}` });
let code = 0;
try {
  process.stdout.write(`${JSON.stringify(await retryRun(db, queue, { workspaceId: values.workspace, agentRunId: values.run }))}\n`);
} catch (err) {
  process.stderr.write(`retry: ${errorMessage(err)}\n`);
  const e = err instanceof EchodoError ? err.code : undefined;
  code = e === 'run_not_found' ? 2 : e === 'action_refused' ? 3 : 1;
} finally {
  await queue.close();
  await db.close();
}
process.exit(code);
