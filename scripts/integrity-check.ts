// npm run integrity-check -- --workspace W --run R [--remote] [--json]
// Exit 0 intact, 1 drift found (each finding printed), 2 usage error or run not found there.
// --remote also compares the rows with the commits and notes on WORKER_CHECKPOINT_REMOTE (exit 2
// when it is not set or cannot be reached: no verdict).
import { loadConfigOrExit } from '../core/config.ts';
import { openDatabase } from '../store/connection.ts';
import { checkRunIntegrity } from '../worker/integrity.ts';
import { errorMessage } from '../core/errors.ts';
import { registerConfigSecrets } from '../worker/secrets.ts';
import { parseCli, usageError } from './cli.ts';

const USAGE = 'npm run integrity-check -- --workspace W --run R [--remote] [--json]';
const { values } = parseCli({ workspace: { type: 'string' }, run: { type: 'string' }, remote: { type: 'boolean', default: false }, json: { type: 'boolean', default: false } }, USAGE);
if (!values.workspace || !values.run) usageError(USAGE, 'both --workspace and --run are required');

const config = loadConfigOrExit();
registerConfigSecrets(config); // the remote's URL is printed with --remote: any credentials in it are masked
if (values.remote && !config.WORKER_CHECKPOINT_REMOTE) usageError(USAGE, '--remote needs WORKER_CHECKPOINT_REMOTE (the checkpoint remote) to be set');
let code = 2;
const db = await openDatabase(config, { migrate: false }).catch((err) => {
  process.stderr.write(`integrity-check: ${errorMessage(err)}\n`);
  process.exit(2);
});
try {
  const report = await checkRunIntegrity(db, config, values.workspace, values.run, { remote: values.remote });
  if (!report) {
    process.stderr.write(`run ${values.run} not found in workspace ${values.workspace}\n`);
  } else {
    code = report.intact ? 0 : 1;
    if (values.json) process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
    else {
      process.stdout.write(`run ${report.agentRunId} (${report.status}) in ${report.workspaceId}: ${report.checkpoints} checkpoint(s), latest seq ${report.latestSeq ?? "-"} at ${report.commitOid?.slice(0, 12) ?? "-"}, ${report.manifest.length} file(s) in the manifest\n`);
      for (const f of report.findings) process.stdout.write(`  DRIFT ${f.kind}: ${f.detail}\n`);
      if (report.remote) process.stdout.write(`remote ${report.remote.remote}: ${report.remote.branch ?? '-'} at ${report.remote.branchTip?.slice(0, 12) ?? '(missing)'}, ${report.remote.rowsChecked} checkpoint(s) compared\n`);
      const agree = report.remote ? 'worktree, Postgres, git notes and the checkpoint remote agree' : 'worktree, Postgres and git notes agree';
      process.stdout.write(report.intact ? `intact: ${agree}\n` : `${report.findings.length} finding(s)\n`);
    }
  }
} catch (err) {
  process.stderr.write(`integrity-check: ${errorMessage(err)}\n`);
  code = 2;
} finally {
  await db.close();
}
process.exit(code);
