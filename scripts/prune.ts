// npm run prune: retention of finished runs' checkpoints (its description below is its --help).
import { loadConfigOrExit } from '../core/config.ts';
import { openDatabase } from '../store/connection.ts';
import { registerConfigSecrets, registerStartupSecrets } from '../worker/secrets.ts';
import { createLogger } from '../worker/log.ts';
import { pruneFinishedRuns } from '../operator/prune.ts';
import { command, exitOnStartupError } from './cli.ts';
import { DATABASE_ENV } from './cli-env.ts';

/** The age of "old" when nothing names one: a month of finished runs keeps every checkpoint. */
const DEFAULT_PRUNE_DAYS = 30;

const { values, fail } = command({
  name: 'prune',
  summary:
    'retention: removes old checkpoints of finished runs (keeping a chain anchor). With WORKER_CHECKPOINT_REMOTE ' +
    "set, each pruned run's refs on the remote are pruned too; a run whose remote refs could not be pruned is left " +
    'as it was (listed under remotePending, one line on stderr each) and the next prune retries it.',
  usage: ['[-- [--older-than <N>d] [--dry-run] [--delete-branches]]'],
  flags: {
    'older-than': {
      type: 'string',
      value: '<N>d',
      help: `finished runs older than N days, e.g. 7d (default: WORKER_CHECKPOINT_RETENTION_DAYS, else ${DEFAULT_PRUNE_DAYS}d)`,
    },
    'dry-run': { type: 'boolean', help: 'report what would be pruned; change nothing' },
    'delete-branches': { type: 'boolean', help: "delete the pruned runs' branches too" },
  },
  exitCodes: { 0: 'done (pending remote runs included): a JSON report on stdout', 1: 'an error', 2: 'bad arguments' },
  env: [
    ...DATABASE_ENV,
    ['WORKER_CHECKPOINT_RETENTION_DAYS', `the age without --older-than (unset: ${DEFAULT_PRUNE_DAYS} days)`],
    'WORKER_REPO_ROOT',
    'WORKER_NOTES_REF',
    'WORKER_CHECKPOINT_REMOTE',
  ],
});
const match = /^(\d+)d$/.exec(values['older-than'] ?? '');
if (values['older-than'] !== undefined && !match) fail('--older-than takes a number of days, e.g. 30d');
exitOnStartupError('prune');

const config = loadConfigOrExit();
const olderThanDays = match ? Number(match[1]) : (config.WORKER_CHECKPOINT_RETENTION_DAYS ?? DEFAULT_PRUNE_DAYS);
registerConfigSecrets(config); // before anything is logged or stored
const db = await openDatabase(config);
await registerStartupSecrets(config, db);
const report = await pruneFinishedRuns(db, {
  olderThanDays,
  dryRun: values['dry-run'] ?? false,
  deleteBranches: values['delete-branches'] ?? false,
  remote: config.WORKER_CHECKPOINT_REMOTE,
  repoRoot: config.WORKER_REPO_ROOT,
  notesRef: config.WORKER_NOTES_REF,
  log: createLogger({ level: 'warn' }),
});
process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
for (const p of report.remotePending) {
  process.stderr.write(`prune: run ${p.agentRunId} left for the next prune (its refs were not pruned): ${p.reason}\n`);
}
await db.close();
