// npm run fork: a new run from a checkpoint of another (its description below is its --help).
import { loadConfigOrExit } from '../core/config.ts';
import { openDatabase } from '../store/connection.ts';
import { registerConfigSecrets, registerStartupSecrets } from '../worker/secrets.ts';
import { EchodoError, errorMessage } from '../core/errors.ts';
import { forkRun } from '../operator/fork.ts';
import { createLogger } from '../worker/log.ts';
import { createQueue } from '../worker/queue/index.ts';
import { command, exitOnStartupError } from './cli.ts';
import { DATABASE_ENV } from './cli-env.ts';

const { values, fail } = command({
  name: 'fork',
  summary:
    "a new run starting from checkpoint N of run R (its own branch and worktree, made at N's commit); " +
    'prints {"jobId","agentRunId","branch"}.',
  usage: ['-- --workspace W --run R --at N [--brief TEXT] [--model M] [--cancel-source]'],
  flags: {
    workspace: { type: 'string', value: 'W', help: 'the workspace of the run' },
    run: { type: 'string', value: 'R', help: 'the run to fork (agentRunId)' },
    at: { type: 'string', value: 'N', help: 'the checkpoint to start from (1, 2, …)' },
    brief: { type: 'string', value: 'TEXT', help: "the new run's brief (default: the source run's)" },
    model: { type: 'string', value: 'M', help: "the new run's model alias or replay:PATH (default: the source run's)" },
    'cancel-source': { type: 'boolean', help: 'cancel the source run too' },
  },
  exitCodes: {
    0: 'forked: one JSON line on stdout',
    1: 'any other error (e.g. a checkpoint commit that does not verify)',
    2: 'bad arguments, or no such run or checkpoint in that workspace (a pruned one says so)',
  },
  env: [...DATABASE_ENV, 'REDIS_URL', 'WORKER_REPO_ROOT', 'WORKER_WORKTREE_BASE', 'WORKER_NOTES_REF'],
});
if (!values.workspace || !values.run || values.at === undefined) fail('--workspace, --run and --at are required');
if (!/^[1-9]\d{0,8}$/.test(values.at!)) fail(`--at must be a checkpoint number (1, 2, …), got "${values.at}"`);
if (values.brief !== undefined && !values.brief.trim()) fail('--brief must not be empty');
if (values.model !== undefined && !values.model.trim()) fail('--model must not be empty');
exitOnStartupError('fork');

const config = loadConfigOrExit();
registerConfigSecrets(config); // before anything is logged or stored
const log = createLogger({ level: 'warn', name: 'fork' });
const db = await openDatabase(config);
await registerStartupSecrets(config, db);
const queue = createQueue({ config, db, workerId: `fork-${process.pid}` });
let code = 0;
try {
  const answer = await forkRun(
    { db, queue, config, log },
    {
      workspaceId: values.workspace!,
      agentRunId: values.run!,
      at: Number(values.at),
      brief: values.brief,
      model: values.model,
      cancelSource: values['cancel-source'] ?? false,
      by: 'cli',
    },
  );
  process.stdout.write(
    `${JSON.stringify({ jobId: answer.jobId, agentRunId: answer.agentRunId, branch: answer.branch })}\n`,
  );
  if (answer.sourceCancel) process.stderr.write(`source run ${values.run}: ${JSON.stringify(answer.sourceCancel)}\n`);
} catch (err) {
  // No such run or checkpoint (a pruned one included, with the retention reason) or a bad --model: 2.
  const bad = err instanceof EchodoError && (err.code === 'run_not_found' || err.code === 'invalid_job');
  process.stderr.write(`fork: ${errorMessage(err)}\n`);
  code = bad ? 2 : 1;
} finally {
  await queue.close();
  await db.close();
}
process.exit(code);
