// npm run stall-detector: the stall detector daemon (its description below is its --help).
import { setTimeout as sleep } from 'node:timers/promises';
import { loadConfigOrExit } from '../core/config.ts';
import { openDatabase } from '../store/connection.ts';
import { createLogger } from '../worker/log.ts';
import { createQueue } from '../worker/queue/index.ts';
import { StallSweeper } from '../operator/stall-detector.ts';
import { pruneFinishedRuns } from '../operator/prune.ts';
import { sweepStoragePolicies } from '../operator/storage-sweep.ts';
import { errorMessage } from '../core/errors.ts';
import { guardDaemon } from '../worker/process-guards.ts';
import { registerConfigSecrets, registerStartupSecrets } from '../worker/secrets.ts';
import { superviseUnlessChild } from '../core/supervisor.ts';
import { command, exitOnStartupError } from './cli.ts';
import { DATABASE_ENV } from './cli-env.ts';

const { values } = command({
  name: 'stall-detector',
  summary:
    'the stall detector daemon: re-dispatches runs whose lease expired (failing them after STALL_MAX_ATTEMPTS), ' +
    'and prunes finished runs on a schedule when WORKER_CHECKPOINT_RETENTION_DAYS is set. Stops on SIGTERM/SIGINT.',
  usage: ['', '-- --once'],
  flags: { once: { type: 'boolean', help: 'run one sweep, print its result as JSON and exit' } },
  exitCodes: {
    0: 'stopped cleanly (or --once done)',
    1: 'could not start (e.g. the database)',
    2: 'bad arguments, or an invalid environment variable (named)',
  },
  env: [
    ...DATABASE_ENV,
    'REDIS_URL',
    'WORKER_QUEUE_KEY',
    'WORKER_LEASE_MS',
    'STALL_CHECK_MS',
    'STALL_MAX_ATTEMPTS',
    'WORKER_RETENTION_SWEEP_MS',
    'WORKER_CHECKPOINT_RETENTION_DAYS',
    'WORKER_CHECKPOINT_REMOTE',
    'WORKER_REPO_ROOT',
    'WORKER_NOTES_REF',
    'ECHODO_SUPERVISE',
    'LOG_LEVEL',
  ],
});
exitOnStartupError('stall-detector');
const config = loadConfigOrExit();
registerConfigSecrets(config); // before the first log line
const log = createLogger({ level: config.LOG_LEVEL, name: 'echodo-stall-detector' });
if (!values.once) await superviseUnlessChild({ name: 'stall-detector', enabled: config.ECHODO_SUPERVISE, log });
const db = await openDatabase(config);
await registerStartupSecrets(config, db);
const queue = createQueue({ config, db, workerId: `stall-detector-${process.pid}` });
if (!values.once) guardDaemon('stall-detector', log);
const PRUNE_EVERY_MS = 60 * 60 * 1000;
const sweeper = new StallSweeper({ config, db, queue, log });

let stopping = false;
const stop = () => {
  stopping = true;
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);

let lastPrune = 0;
let lastStorageSweep = 0;
do {
  try {
    const result = await sweeper.once();
    if (values.once && result) process.stdout.write(`${JSON.stringify(result)}\n`);
    // Each workspace's retention policy and quota (operator/storage-sweep.ts), on their own period.
    if (values.once || Date.now() - lastStorageSweep >= config.WORKER_RETENTION_SWEEP_MS) {
      lastStorageSweep = Date.now();
      await sweepStoragePolicies({
        db,
        log,
        repoRoot: config.WORKER_REPO_ROOT,
        notesRef: config.WORKER_NOTES_REF,
        remote: config.WORKER_CHECKPOINT_REMOTE,
      });
    }
    if (config.WORKER_CHECKPOINT_RETENTION_DAYS && Date.now() - lastPrune > PRUNE_EVERY_MS) {
      lastPrune = Date.now();
      // The remote's refs too (never branches: their removal is the operator's call, `prune --delete-branches`).
      await pruneFinishedRuns(db, {
        olderThanDays: config.WORKER_CHECKPOINT_RETENTION_DAYS,
        dryRun: false,
        log,
        remote: config.WORKER_CHECKPOINT_REMOTE,
        repoRoot: config.WORKER_REPO_ROOT,
        notesRef: config.WORKER_NOTES_REF,
      });
    }
  } catch (err) {
    log.error({ error: errorMessage(err) }, 'sweep failed; retrying next period');
  }
  if (!values.once && !stopping) await sleep(config.STALL_CHECK_MS);
} while (!values.once && !stopping);

await queue.close();
await db.close();
process.exit(0);
