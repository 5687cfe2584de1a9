// npm run prune -- --older-than 30d [--dry-run] [--delete-branches]
// With WORKER_CHECKPOINT_REMOTE set, each pruned run's refs on the remote are pruned too; a run
// whose remote refs could not be pruned is left as it was (listed under remotePending, one line on
// stderr each) and the next prune retries it. Exit 0 (the contract's), pending runs included.
import { loadConfigOrExit } from '../core/config.ts';
import { openDatabase } from '../store/connection.ts';
import { registerConfigSecrets, registerStartupSecrets } from '../worker/secrets.ts';
import { createLogger } from '../worker/log.ts';
import { pruneFinishedRuns } from '../worker/prune.ts';
import { exitOnStartupError, parseCli, usageError } from './cli.ts';

exitOnStartupError('prune');

const USAGE = 'npm run prune -- --older-than <N>d [--dry-run] [--delete-branches]';
const { values } = parseCli({
  'older-than': { type: 'string' }, 'dry-run': { type: 'boolean', default: false }, 'delete-branches': { type: 'boolean', default: false },
}, USAGE);
const match = /^(\d+)d$/.exec(values['older-than'] ?? '');
if (!match) usageError(USAGE, '--older-than takes a number of days, e.g. 30d');
const config = loadConfigOrExit();
registerConfigSecrets(config); // before anything is logged or stored
const db = await openDatabase(config);
await registerStartupSecrets(config, db);
const report = await pruneFinishedRuns(db, {
  olderThanDays: Number(match[1]),
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
