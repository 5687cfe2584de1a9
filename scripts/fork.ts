// npm run fork -- --workspace W --run R --at N [--brief TEXT] [--model M] [--cancel-source]
// A new run from checkpoint N of run R (its own branch and worktree, made at N's commit).
// Prints {"jobId","agentRunId","branch"}. Exit 0 ok; 2 bad arguments, or no such checkpoint in
// that workspace (a pruned one says so); 1 anything else (e.g. a commit that does not verify).
import { loadConfigOrExit } from '../core/config.ts';
import { openDatabase } from '../store/connection.ts';
import { registerConfigSecrets, registerStartupSecrets } from '../worker/secrets.ts';
import { EchodoError, errorMessage } from '../core/errors.ts';
import { forkRun } from '../worker/fork.ts';
import { createLogger } from '../worker/log.ts';
import { createQueue } from '../worker/queue/index.ts';
import { exitOnStartupError, parseCli, usageError } from './cli.ts';

exitOnStartupError('fork');

const USAGE = 'npm run fork -- --workspace W --run R --at N [--brief TEXT] [--model M] [--cancel-source]';
const { values, positionals } = parseCli(
  {
    workspace: { type: 'string' },
    run: { type: 'string' },
    at: { type: 'string' },
    brief: { type: 'string' },
    model: { type: 'string' },
    'cancel-source': { type: 'boolean', default: false },
  },
  USAGE,
);
if (positionals.length) usageError(USAGE, `unexpected argument(s): ${positionals.join(' ')}`);
if (!values.workspace || !values.run || values.at === undefined) usageError(USAGE, '--workspace, --run and --at are required');
if (!/^[1-9]\d{0,8}$/.test(values.at)) usageError(USAGE, `--at must be a checkpoint number (1, 2, …), got "${values.at}"`);
if (values.brief !== undefined && !values.brief.trim()) usageError(USAGE, '--brief must not be empty');
if (values.model !== undefined && !values.model.trim()) usageError(USAGE, '--model must not be empty');

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
      workspaceId: values.workspace,
      agentRunId: values.run,
      at: Number(values.at),
      brief: values.brief,
      model: values.model,
      cancelSource: values['cancel-source'],
      by: 'cli',
    },
  );
  process.stdout.write(`${JSON.stringify({ jobId: answer.jobId, agentRunId: answer.agentRunId, branch: answer.branch })}\n`);
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
