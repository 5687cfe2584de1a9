// npm run dispatch -- --job FILE: validate a job file, record the run, enqueue it (the spec below
// is its help). A job naming an existing agentRunId re-dispatches that run (worker/run/admission.ts).
import { readFileSync } from 'node:fs';
import { loadConfigOrExit } from '../core/config.ts';
import { openDatabase, type Database } from '../store/connection.ts';
import { workspaceExists } from '../store/runs.ts';
import { withWorkspace } from '../store/workspace.ts';
import { modelProvider } from '../store/settings-lookup.ts';
import { resolveHarnessForJob } from '../worker/run/harnesses.ts';
import { dispatchJob } from '../operator/dispatch.ts';
import { EchodoError, errorMessage } from '../core/errors.ts';
import { createQueue } from '../worker/queue/index.ts';
import { parseJob, type Job } from '../core/job.ts';
import { registerConfigSecrets, registerStartupSecrets } from '../worker/secrets.ts';
import { command, exitOnStartupError } from './cli.ts';
import { DATABASE_ENV } from './cli-env.ts';

const { values, fail } = command({
  name: 'dispatch',
  summary:
    'validates a job file, records the run and enqueues it; prints one JSON line {"jobId","agentRunId"}. ' +
    'A job naming an existing agentRunId re-dispatches that run.',
  usage: ['-- --job FILE'],
  flags: { job: { type: 'string', value: 'FILE', help: 'the job, as JSON (the format is in docs/reference.md)' } },
  exitCodes: {
    0: 'dispatched: one JSON line on stdout',
    1: 'any other error (e.g. the database could not be reached)',
    2: 'bad arguments, or an invalid job (each bad field named, an unknown workspace or model alias too)',
    3: 're-dispatch refused (one line: why)',
  },
  env: [...DATABASE_ENV, 'REDIS_URL', 'WORKER_QUEUE_KEY', 'WORKER_REPO_ROOT', 'WORKER_PROVIDER_KEY_VARS'],
});
if (!values.job) fail('missing --job FILE');
const jobFile = values.job!;
exitOnStartupError('dispatch');

let input: unknown;
try {
  input = JSON.parse(readFileSync(jobFile, 'utf8'));
} catch (err) {
  process.stderr.write(`invalid job file ${jobFile}: ${errorMessage(err)}\n`);
  process.exit(2);
}

// Schema problems are reported before any database is touched.
const checked = parseJob(input);
if (!checked.ok) {
  process.stderr.write(`invalid job ${jobFile}:\n${checked.problems.map((p) => `  ${p}`).join('\n')}\n`);
  process.exit(2);
}

/**
 * A model alias the workspace does not have, or no model for a harness run by the worker's own
 * loop (a remote adapter's agent needs none), would only fail once a worker took the job.
 */
async function unknownModel(db: Database, job: Job): Promise<string | undefined> {
  if (job.model?.startsWith('replay:')) return undefined;
  return withWorkspace(db.app, job.workspaceId, async (tx) => {
    if (!(await workspaceExists(tx))) return undefined; // dispatchJob names the workspace
    if (!job.model) {
      // An unknown harness is left to the worker, which fails the run naming it.
      const harness = await resolveHarnessForJob(tx, job, config).catch(() => undefined);
      if (harness?.adapter !== 'minimal') return undefined;
      return (
        `model: the job names no model, and harness ${harness.alias} runs the worker's own loop ` +
        `(name a model alias, or a harness whose adapter is a remote agent)`
      );
    }
    if (await modelProvider(tx, job.model!)) return undefined;
    return (
      `model: "${job.model}" is not a model alias of workspace "${job.workspaceId}" ` +
      `(add it with: npm run workspace -- model add --workspace ${job.workspaceId} --alias ${job.model} …)`
    );
  });
}

const config = loadConfigOrExit();
registerConfigSecrets(config);
const db = await openDatabase(config);
await registerStartupSecrets(config, db); // the brief is redacted before it is stored
const queue = createQueue({ config, db, workerId: `dispatch-${process.pid}` });
let code = 0;
try {
  const problem = await unknownModel(db, checked.job);
  if (problem) throw new EchodoError('invalid_job', problem);
  const { jobId, agentRunId } = await dispatchJob(db, queue, input, { defaultRepoPath: config.WORKER_REPO_ROOT });
  process.stdout.write(`${JSON.stringify({ jobId, agentRunId })}\n`);
} catch (err) {
  const invalid = err instanceof EchodoError && (err.code === 'invalid_job' || err.code === 'workspace_not_found');
  const refused = err instanceof EchodoError && err.code === 'action_refused';
  const prefix = invalid ? 'invalid job:\n' : refused ? 're-dispatch refused: ' : '';
  process.stderr.write(`${prefix}${errorMessage(err)}\n`);
  code = invalid ? 2 : refused ? 3 : 1;
} finally {
  await queue.close();
  await db.close();
}
process.exit(code);
