// Retention: delete checkpoint rows of runs finished before the cutoff (each run keeps its last
// row, and an anchor keeps the chain verifiable) and remove their worktrees — never one with
// uncommitted changes. The branch stays: the content lives there.
import { existsSync } from 'node:fs';
import type { Database } from '../store/connection.ts';
import { getRun } from '../store/runs.ts';
import { pruneRunCheckpoints } from '../store/retention.ts';
import { withWorkspace } from '../store/workspace.ts';
import { runGit } from './git.ts';
import type { Logger } from './log.ts';

export interface PruneReport {
  runs: number;
  rowsDeleted: number;
  worktreesRemoved: string[];
  worktreesKept: { path: string; reason: string }[];
  dryRun: boolean;
}

export async function pruneFinishedRuns(db: Database, options: { olderThanDays: number; dryRun: boolean; log: Logger }): Promise<PruneReport> {
  const report: PruneReport = { runs: 0, rowsDeleted: 0, worktreesRemoved: [], worktreesKept: [], dryRun: options.dryRun };
  const runs = await db.admin<{ workspace_id: string; agent_run_id: string }[]>`
    select * from echodo_prunable_runs(make_interval(days => ${options.olderThanDays}))`;
  for (const { workspace_id, agent_run_id } of runs) {
    report.runs++;
    const { deleted, run } = await withWorkspace(db.app, workspace_id, async (tx) => ({
      deleted: await pruneRunCheckpoints(tx, agent_run_id, options.dryRun),
      run: await getRun(tx, agent_run_id),
    }));
    report.rowsDeleted += deleted;
    const wt = run?.worktree_path;
    if (!wt || !existsSync(wt)) continue;
    const status = await runGit(wt, ['status', '--porcelain'], { allowExitCodes: [128] });
    if (status.exitCode !== 0 || status.stdout.trim()) {
      report.worktreesKept.push({ path: wt, reason: status.exitCode !== 0 ? 'not a readable worktree' : 'has uncommitted changes' });
      continue;
    }
    if (!options.dryRun) await runGit(wt, ['worktree', 'remove', wt]);
    report.worktreesRemoved.push(wt);
  }
  options.log.info(report, options.dryRun ? 'prune (dry run)' : 'pruned');
  return report;
}
