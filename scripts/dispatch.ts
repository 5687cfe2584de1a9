// npm run dispatch -- --job FILE: validate a job file, record the run, enqueue it.
import { readFileSync } from 'node:fs';
import { loadConfigOrExit } from '../worker/config.ts';
import { openDatabase } from '../store/connection.ts';
import { dispatchJob } from '../worker/dispatch.ts';
import { EchodoError, errorMessage } from '../worker/errors.ts';
import { createQueue } from '../worker/queue/index.ts';
import { parseJob } from '../worker/job.ts';
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
  process.stdout.write(`${JSON.stringify(await dispatchJob(db, queue, input))}\n`);
} catch (err) {
  const invalid = err instanceof EchodoError && (err.code === 'invalid_job' || err.code === 'workspace_not_found');
  process.stderr.write(`${invalid ? 'invalid job:\n' : ''}${errorMessage(err)}\n`);
  code = invalid ? 2 : 1;
} finally {
  await queue.close();
  await db.close();
}
process.exit(code);
