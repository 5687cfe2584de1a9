// npm run cancel -- --workspace W --run R
// Cancels a run: at once when nobody is working on it (queued, or its worker dead), else its
// worker stops at the next tool boundary. Prints {"agentRunId","status","immediate",…}.
// Exit 0 ok; 2 bad arguments or no such run in that workspace; 3 refused (already finished).
import { loadConfigOrExit } from '../core/config.ts';
import { openDatabase } from '../store/connection.ts';
import { registerConfigSecrets, registerStartupSecrets } from '../worker/secrets.ts';
import { requestCancel } from '../worker/cancel.ts';
import { EchodoError, errorMessage } from '../core/errors.ts';
import { createLogger } from '../worker/log.ts';
import { exitOnStartupError, parseCli, usageError } from './cli.ts';

exitOnStartupError('cancel');

const USAGE = 'npm run cancel -- --workspace W --run R';
const { values, positionals } = parseCli({ workspace: { type: 'string' }, run: { type: 'string' } }, USAGE);
if (positionals.length) usageError(USAGE, `unexpected argument(s): ${positionals.join(' ')}`);
if (!values.workspace || !values.run) usageError(USAGE, 'both --workspace and --run are required');

const config = loadConfigOrExit();
registerConfigSecrets(config); // before anything is logged or stored
const log = createLogger({ level: 'warn', name: 'cancel' });
const db = await openDatabase(config);
await registerStartupSecrets(config, db);
let code = 0;
try {
  const answer = await requestCancel(db, values.workspace, values.run, 'cli', { repoRoot: config.WORKER_REPO_ROOT, log });
  process.stdout.write(`${JSON.stringify(answer)}\n`);
} catch (err) {
  process.stderr.write(`cancel: ${errorMessage(err)}\n`);
  const e = err instanceof EchodoError ? err.code : undefined;
  code = e === 'run_not_found' ? 2 : e === 'action_refused' ? 3 : 1;
} finally {
  await db.close();
}
process.exit(code);
