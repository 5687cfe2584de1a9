// npm run prune -- --older-than 30d [--dry-run]
import { loadConfigOrExit } from '../core/config.ts';
import { openDatabase } from '../store/connection.ts';
import { registerConfigSecrets, registerStartupSecrets } from '../worker/secrets.ts';
import { createLogger } from '../worker/log.ts';
import { pruneFinishedRuns } from '../worker/prune.ts';
import { exitOnStartupError, parseCli, usageError } from './cli.ts';

exitOnStartupError('prune');

const USAGE = 'npm run prune -- --older-than <N>d [--dry-run]';
const { values } = parseCli({ 'older-than': { type: 'string' }, 'dry-run': { type: 'boolean', default: false } }, USAGE);
const match = /^(\d+)d$/.exec(values['older-than'] ?? '');
if (!match) usageError(USAGE, '--older-than takes a number of days, e.g. 30d');
const config = loadConfigOrExit();
registerConfigSecrets(config); // before anything is logged or stored
const db = await openDatabase(config);
await registerStartupSecrets(config, db);
const report = await pruneFinishedRuns(db, { olderThanDays: Number(match[1]), dryRun: values['dry-run'] ?? false, log: createLogger({ level: 'warn' }) });
process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
await db.close();
