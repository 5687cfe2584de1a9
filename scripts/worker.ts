// npm run worker: the worker daemon (its description below is its --help).
import { homePlacementProblem, loadConfigOrExit, maskedConfig } from '../core/config.ts';
import { openDatabase } from '../store/connection.ts';
import { createLogger } from '../worker/log.ts';
import { createQueue } from '../worker/queue/index.ts';
import { WorkerDaemon } from '../worker/daemon.ts';
import { startWorkerMetrics } from '../worker/metrics.ts';
import { startTracing } from '../worker/tracing.ts';
import { errorMessage } from '../core/errors.ts';
import { guardDaemon } from '../worker/process-guards.ts';
import { redactString } from '../core/redact.ts';
import { describeSandbox, sandboxFor, sandboxOptionsFromConfig } from '../worker/sandbox/index.ts';
import { setUpTrees } from '../worker/tree/setup.ts';
import { registeredRepoPaths } from '../store/grants.ts';
import { registerConfigSecrets, registerStartupSecrets } from '../worker/secrets.ts';
import { superviseUnlessChild } from '../core/supervisor.ts';
import { command } from './cli.ts';
import { DATABASE_ENV } from './cli-env.ts';

command({
  name: 'worker',
  summary:
    'the worker daemon: takes jobs from the queue (Redis when REDIS_URL is set, else Postgres), runs each brief ' +
    'in its worktree with a checkpoint every N tool rounds, and resumes a re-dispatched run from its last ' +
    'checkpoint. WORKER_DRY_RUN=1 prints a banner (configuration, secrets masked) and exits.',
  usage: [''],
  flags: {},
  exitCodes: {
    0: 'stopped cleanly on SIGTERM/SIGINT (or the dry run)',
    1: 'could not start',
    2: 'bad arguments, or an invalid environment variable (named)',
    3: 'a lease lost while the process was paused: a fresh process is wanted (the supervisor starts one)',
  },
  env: [
    ...DATABASE_ENV,
    'REDIS_URL',
    'WORKER_QUEUE_KEY',
    'WORKER_DRY_RUN',
    'WORKER_ID',
    'WORKER_REPO_ROOT',
    'WORKER_WORKTREE_BASE',
    'WORKER_NOTES_REF',
    'WORKER_REPLAY_DIR',
    'WORKER_BLPOP_TIMEOUT_S',
    'WORKER_MAX_TOOL_STEPS',
    'WORKER_CHECKPOINT_EVERY_N_STEPS',
    'WORKER_CONTEXT_ROUNDS',
    'WORKER_HEARTBEAT_MS',
    'WORKER_LEASE_MS',
    'WORKER_ALLOWED_COMMANDS',
    'WORKER_SANDBOX',
    'WORKER_PROVIDER_KEY_VARS',
    'WORKER_HOST_ID',
    'WORKER_CHECKPOINT_REMOTE',
    'WORKER_SPARE_WORKTREE',
    'WORKER_METRICS_PORT',
    'OTEL_EXPORTER_OTLP_ENDPOINT',
    'ECHODO_SUPERVISE',
    'LOG_LEVEL',
  ],
});

const config = loadConfigOrExit();
registerConfigSecrets(config); // before the first log line
const log = createLogger({ level: config.LOG_LEVEL, name: 'echodo-worker' }).child({ workerId: config.WORKER_ID });

// Probed once: run_command is refused (fail closed) when bwrap is unusable; 'off' is warned about.
const sandbox = await sandboxFor(sandboxOptionsFromConfig(config));
const sandboxLine = describeSandbox(sandbox);
const treesLine = await setUpTrees(config, sandbox);

if (config.WORKER_DRY_RUN) {
  process.stdout.write(
    `echodo-worker ${config.WORKER_ID} (dry run)\n${JSON.stringify(maskedConfig(config), null, 2)}\nsandbox: ${sandboxLine}\n`,
  );
  process.exit(0);
}
await superviseUnlessChild({ name: 'worker', enabled: config.ECHODO_SUPERVISE, log });

try {
  const db = await openDatabase(config);
  // A registered repository is a tree agents work in: the home (its passwords) must lie outside it.
  const misplaced = homePlacementProblem(config, await registeredRepoPaths(db.admin));
  if (misplaced) {
    log.fatal(misplaced);
    process.exit(2);
  }
  const { registered } = await registerStartupSecrets(config, db);
  const queue = createQueue({
    config,
    db,
    workerId: config.WORKER_ID,
    onError: (err) => log.warn({ error: errorMessage(err) }, 'queue error'),
  });
  const daemon = new WorkerDaemon({ config, db, queue, workerId: config.WORKER_ID, log });
  guardDaemon('worker', log);
  if (sandbox.mode === 'bwrap' && sandbox.usable) log.info({ sandbox: sandboxLine }, 'sandbox ready');
  else
    log.warn(
      { sandbox: sandboxLine },
      sandbox.mode === 'off'
        ? 'WORKER_SANDBOX=off: run_command is not confined'
        : 'sandbox unusable: run_command will be refused',
    );
  process.once('SIGTERM', () => daemon.stop());
  process.once('SIGINT', () => daemon.stop());
  if (config.WORKER_SANDBOX === 'bwrap' && sandbox.mode === 'bwrap' && sandbox.usable)
    log.info({ trees: treesLine }, 'trees confined');
  else log.warn({ trees: treesLine }, 'trees not confined');
  if (process.getuid?.() === 0) log.warn('running as root: run the worker as a dedicated user (docs/operations.md)');
  const metrics = config.WORKER_METRICS_PORT ? await startWorkerMetrics(config.WORKER_METRICS_PORT) : undefined;
  const tracing = config.OTEL_EXPORTER_OTLP_ENDPOINT
    ? await startTracing(config.OTEL_EXPORTER_OTLP_ENDPOINT)
    : undefined;
  log.info(
    { queue: queue.backend, secretsRegistered: registered, metricsPort: metrics?.port ?? null },
    'worker started',
  );
  const code = await daemon.run();
  await metrics?.close();
  await tracing?.shutdown().catch((err) => log.warn({ error: errorMessage(err) }, 'traces not all exported'));
  log.info({ results: daemon.results, exitCode: code }, 'worker stopped');
  await queue.close();
  await db.close();
  process.exit(code);
} catch (err) {
  log.fatal({ error: errorMessage(err) }, 'worker could not start');
  process.stderr.write(`echodo-worker: ${redactString(errorMessage(err))}\n`);
  process.exit(1);
}
