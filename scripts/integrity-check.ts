// npm run integrity-check: a check of a run's worktree (read-only but for --repair-notes, which
// rewrites git notes only); its description below is its --help.
import { loadConfigOrExit } from '../core/config.ts';
import { openDatabase } from '../store/connection.ts';
import { setUpTrees } from '../worker/tree/setup.ts';
import { checkRunIntegrity } from '../operator/integrity.ts';
import { errorMessage } from '../core/errors.ts';
import { registerConfigSecrets } from '../worker/secrets.ts';
import { command, exitOnStartupError } from './cli.ts';
import { DATABASE_ENV } from './cli-env.ts';

const { values, fail } = command({
  name: 'integrity-check',
  summary:
    "a read-only check of a run's worktree against its latest checkpoint and the git notes mirror; " +
    'each finding is printed. With --repair-notes, the missing or wrong notes of checkpoint commits still on ' +
    "the run's branch are rewritten from Postgres (the commits no longer on it are reported); the worktree is " +
    'never touched.',
  usage: ['-- --workspace W --run R [--remote] [--repair-notes] [--json]'],
  flags: {
    workspace: { type: 'string', value: 'W', help: 'the workspace of the run' },
    run: { type: 'string', value: 'R', help: 'the run to check (agentRunId)' },
    remote: { type: 'boolean', help: 'also compare the rows with the commits and notes on WORKER_CHECKPOINT_REMOTE' },
    'repair-notes': {
      type: 'boolean',
      help: "rewrite missing or wrong notes from Postgres for checkpoint commits still on the run's branch",
    },
    json: { type: 'boolean', help: 'print the report as JSON' },
  },
  exitCodes: {
    0: 'intact (with --repair-notes: repaired and intact)',
    1: 'drift found, or left after the repair (each finding printed)',
    2: 'bad arguments, the run not found in that workspace, or (--remote) no remote set or reachable',
  },
  env: [...DATABASE_ENV, 'WORKER_NOTES_REF', 'WORKER_CHECKPOINT_REMOTE'],
});
if (!values.workspace || !values.run) fail('both --workspace and --run are required');
const workspaceId = values.workspace!;
const agentRunId = values.run!;
exitOnStartupError('integrity-check');

const config = loadConfigOrExit();
registerConfigSecrets(config); // the remote's URL is printed with --remote: any credentials in it are masked
if (values.remote && !config.WORKER_CHECKPOINT_REMOTE) {
  fail('--remote needs WORKER_CHECKPOINT_REMOTE (the checkpoint remote) to be set');
}
await setUpTrees(config); // the check reads the run's tree through its sandboxed tree process
let code = 2;
const db = await openDatabase(config, { migrate: false }).catch((err) => {
  process.stderr.write(`integrity-check: ${errorMessage(err)}\n`);
  process.exit(2);
});
try {
  const report = await checkRunIntegrity(db, config, workspaceId, agentRunId, {
    remote: values.remote ?? false,
    repairNotes: values['repair-notes'] ?? false,
  });
  if (!report) {
    process.stderr.write(`run ${agentRunId} not found in workspace ${workspaceId}\n`);
  } else {
    code = report.intact ? 0 : 1;
    if (values.json) process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
    else {
      process.stdout.write(
        `run ${report.agentRunId} (${report.status}) in ${report.workspaceId}: ${report.checkpoints} checkpoint(s), latest seq ${report.latestSeq ?? '-'} at ${report.commitOid?.slice(0, 12) ?? '-'}, ${report.manifest.length} file(s) in the manifest\n`,
      );
      const repair = report.notesRepair;
      if (repair) {
        const list = (seqs: number[]) => (seqs.length ? seqs.join(', ') : 'none');
        process.stdout.write(
          `notes rewritten from Postgres for checkpoint(s) ${list(repair.rewritten)}; ` +
            `no longer on the branch: ${list(repair.offBranch)}\n`,
        );
      }
      for (const f of report.findings) process.stdout.write(`  DRIFT ${f.kind}: ${f.detail}\n`);
      if (report.remote)
        process.stdout.write(
          `remote ${report.remote.remote}: ${report.remote.branch ?? '-'} at ${report.remote.branchTip?.slice(0, 12) ?? '(missing)'}, ${report.remote.rowsChecked} checkpoint(s) compared\n`,
        );
      const agree = report.remote
        ? 'worktree, Postgres, git notes and the checkpoint remote agree'
        : 'worktree, Postgres and git notes agree';
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
