// npm run dispatch -- --job FILE: validate a job file, record the run, enqueue it. A job naming an
// existing agentRunId re-dispatches that run (worker/redispatch.ts). Exit 0: one JSON line;
// 2: an invalid job (each bad field named); 3: a re-dispatch refused (one line: why).
import { readFileSync } from 'node:fs';
import { loadConfigOrExit } from '../core/config.ts';
import { openDatabase } from '../store/connection.ts';
import { dispatchJob } from '../worker/dispatch.ts';
import { EchodoError, errorMessage } from '../core/errors.ts';
import { createQueue } from '../worker/queue/index.ts';
import { parseJob } from '../core/job.ts';
import { registerConfigSecrets, registerStartupSecrets } from '../worker/secrets.ts';
import { exitOnStartupError, parseCli, usageError } from './cli.ts';

exitOnStartupError('dispatch');

const USAGE = 'npm run dispatch -- --job FILE';
const { values } = parseCli({ job: { type: 'string' } }, USAGE);
if (!values.job) usageError(USAGE, 'missing --job');

let input: unknown;
try {
  input = JSON.parse(readFileSync(values.job, 'utf8'));
} catch (err) {
  process.stderr.write(`invalid job file ${values.job}: ${errorMessage(err)}\n`);
  process.exit(2);
}

// Schema problems are reported before any database is touched.
const checked = parseJob(input);
if (!checked.ok) {
  process.stderr.write(`invalid job ${values.job}:\n${checked.problems.map((p) => `  ${p}`).join('\n')}\n`);
  process.exit(2);
}

const config = loadConfigOrExit();
registerConfigSecrets(config);
const db = await openDatabase(config);
await registerStartupSecrets(config, db); // the brief is redacted before it is stored
const queue = createQueue({ config, db, workerId: `dispatch-${process.pid}` });
let code = 0;
try {
  const { jobId, agentRunId } = await dispatchJob(db, queue, input, { defaultRepoPath: config.WORKER_REPO_ROOT });
  process.stdout.write(`${JSON.stringify({ jobId, agentRunId })}\n`);
} catch (err) {
  const invalid = err instanceof EchodoError && (err.code === 'invalid_job' || err.code === 'workspace_not_found');
  const refused = err instanceof EchodoError && err.code === 'action_refused';
  process.stderr.write(`${invalid ? 'invalid job:\n' : ''}${refused ? 're-dispatch refused: ' : ''}${errorMessage(err)}\n`);
  code = invalid ? 2 : refused ? 3 : 1;
} finally {
  await queue.close();
  await db.close();
}
process.exit(code);
