// `npm run prune`: retention of finished runs past an age. Each run keeps its last checkpoint row
// (and an anchor that keeps the chain verifiable), pruned by the path the storage sweep takes too
// (operator/prune-runs.ts: the remote's refs, then the notes, then the rows; a run whose refs could
// not be pruned is left for the next prune). Then its worktree is removed, never one with
// uncommitted changes. The branch stays (the content lives there) unless the operator asks for
// branch removal (docs/checkpoints.md "Retention").
import { existsSync } from 'node:fs';
import type { Database } from '../store/connection.ts';
import { LAST_ROW } from '../store/retention.ts';
import { withWorkspace } from '../store/workspace.ts';
import { runGit } from '../worker/git/run-git.ts';
import type { Logger } from '../worker/log.ts';
import { runNotesRef } from '../worker/remote/push.ts';
import { planPrunes, prunePlannedRuns, type RunPrune } from './prune-runs.ts';

export interface PruneReport {
  runs: number;
  rowsDeleted: number;
  worktreesRemoved: string[];
  worktreesKept: { path: string; reason: string }[];
  /** With branch removal: the runs' branches deleted (locally and, with a remote, there too). */
  branchesDeleted: string[];
  /** Refs changed on the checkpoint remote (`<ref> -> <oid|deleted>`; on a dry run, what would be). */
  remoteRefsUpdated: string[];
  /** Notes removed from WORKER_NOTES_REF: the pruned checkpoints' (with branch removal, the kept one's too). */
  notesRemoved: number;
  /**
   * Runs left as they were because their refs could not be pruned (on the checkpoint remote, or
   * their notes here): the next prune retries them.
   */
  remotePending: { agentRunId: string; reason: string }[];
  dryRun: boolean;
}

export interface PruneOptions {
  olderThanDays: number;
  dryRun: boolean;
  log: Logger;
  /** WORKER_CHECKPOINT_REMOTE: the runs' refs there are pruned too. */
  remote?: string;
  /** WORKER_REPO_ROOT: the repository of runs whose job named none. */
  repoRoot?: string;
  /** WORKER_NOTES_REF: the pruned checkpoints' notes are removed from it. */
  notesRef: string;
  /** Also delete each pruned run's branch (and its notes ref on the remote). */
  deleteBranches?: boolean;
}

export async function pruneFinishedRuns(db: Database, options: PruneOptions): Promise<PruneReport> {
  const listed = await db.admin<{ workspace_id: string; agent_run_id: string }[]>`
    select * from echodo_prunable_runs(make_interval(days => ${options.olderThanDays}))`;
  const byWorkspace = new Map<string, string[]>();
  for (const r of listed) byWorkspace.set(r.workspace_id, [...(byWorkspace.get(r.workspace_id) ?? []), r.agent_run_id]);
  const plans: RunPrune[] = [];
  const worktreeKept = new Map<RunPrune, string>();
  for (const [workspaceId, ids] of byWorkspace) {
    const planned = await withWorkspace(db.app, workspaceId, (tx) => planPrunes(tx, ids, LAST_ROW, options.repoRoot));
    for (const plan of planned) {
      const kept = await worktreeKeptReason(plan.run.worktree_path);
      // A kept worktree keeps its branch as well.
      const run: RunPrune = { ...plan, deleteBranch: !!options.deleteBranches && !kept };
      if (kept) worktreeKept.set(run, kept);
      plans.push(run);
    }
  }
  const pruned = await prunePlannedRuns(db, plans, { ...options, keep: LAST_ROW, who: 'prune' });
  const report: PruneReport = {
    runs: plans.length,
    rowsDeleted: pruned.rowsDeleted,
    worktreesRemoved: [],
    worktreesKept: [],
    branchesDeleted: [],
    remoteRefsUpdated: pruned.remoteRefsUpdated,
    notesRemoved: pruned.notesRemoved,
    remotePending: pruned.pending,
    dryRun: options.dryRun,
  };
  for (const plan of pruned.done) {
    const wt = plan.run.worktree_path;
    const kept = worktreeKept.get(plan);
    if (kept) report.worktreesKept.push({ path: wt!, reason: kept });
    else if (wt && existsSync(wt)) {
      if (!options.dryRun) await runGit(wt, ['worktree', 'remove', wt]);
      report.worktreesRemoved.push(wt);
    }
    if (plan.deleteBranch) await deleteLocalBranch(plan, options, report);
  }
  options.log.info(report, options.dryRun ? 'prune (dry run)' : 'pruned');
  return report;
}

/** undefined: the worktree may go (or is gone); else why it stays. */
async function worktreeKeptReason(wt: string | null): Promise<string | undefined> {
  if (!wt || !existsSync(wt)) return undefined;
  const status = await runGit(wt, ['status', '--porcelain'], { allowExitCodes: [128] });
  if (status.exitCode !== 0) return 'not a readable worktree';
  return status.stdout.trim() ? 'has uncommitted changes' : undefined;
}

/** The run's branch and its notes ref in the local repository (its worktree is gone by now). */
async function deleteLocalBranch(plan: RunPrune, options: PruneOptions, report: PruneReport): Promise<void> {
  if (!plan.run.branch || !plan.repoPath || !existsSync(plan.repoPath)) return;
  const branchRef = `refs/heads/${plan.run.branch}`;
  const local = await runGit(plan.repoPath, ['rev-parse', '--verify', '--quiet', branchRef], {
    allowExitCodes: [1, 128],
  });
  const remoteHad = options.remote && report.remoteRefsUpdated.includes(`${branchRef} -> deleted`);
  if (local.exitCode !== 0 && !remoteHad) return;
  if (!options.dryRun && local.exitCode === 0) {
    await runGit(plan.repoPath, ['update-ref', '-d', branchRef]);
    await runGit(plan.repoPath, ['update-ref', '-d', runNotesRef(plan.workspaceId, plan.run.id)], {
      allowExitCodes: [1],
    });
  }
  report.branchesDeleted.push(plan.run.branch);
}
