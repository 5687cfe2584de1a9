// Retention: delete checkpoint rows of runs finished before the cutoff (each run keeps its last
// row, and an anchor keeps the chain verifiable) and remove their worktrees — never one with
// uncommitted changes. The branch stays (the content lives there) unless the operator asks for
// branch removal. Order, and why: with a checkpoint remote, the run's refs there are pruned first
// (one push); then the pruned checkpoints' notes leave WORKER_NOTES_REF (one rewrite per
// repository, its history squashed so that `git gc` can give their bytes back); only then the
// rows. A step that fails leaves its runs untouched, so they stay prunable and the next prune
// retries them (nothing to record; docs/checkpoints.md "Retention").
import { existsSync } from 'node:fs';
import type { Database } from '../store/connection.ts';
import { latestCheckpoint, type CheckpointRow } from '../store/checkpoints.ts';
import { getRun, type RunRow } from '../store/runs.ts';
import { prunableCommits, pruneRunCheckpoints } from '../store/retention.ts';
import { withWorkspace } from '../store/workspace.ts';
import { redactString } from '../core/redact.ts';
import { faultPoint } from '../worker/faults.ts';
import { runGit } from '../worker/git/run-git.ts';
import type { Logger } from '../worker/log.ts';
import { dropCheckpointNotes } from '../worker/checkpoints/notes.ts';
import { pruneRemoteRefs, remoteRefs, type RemotePrunePlan } from '../worker/remote/retention.ts';
import { runNotesRef } from '../worker/remote/push.ts';

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

interface Plan {
  workspaceId: string;
  run: RunRow;
  /** Rows a prune deletes (all but the last). */
  toDelete: number;
  /** Their commits (none the last row names too): their notes go with them. */
  prunedCommits: string[];
  kept: CheckpointRow | undefined;
  repoPath: string | undefined;
  /** Why the worktree is kept (uncommitted changes): its branch is kept as well. */
  worktreeKept?: string;
}

export async function pruneFinishedRuns(db: Database, options: PruneOptions): Promise<PruneReport> {
  const report: PruneReport = {
    runs: 0,
    rowsDeleted: 0,
    worktreesRemoved: [],
    worktreesKept: [],
    branchesDeleted: [],
    remoteRefsUpdated: [],
    notesRemoved: 0,
    remotePending: [],
    dryRun: options.dryRun,
  };
  const runs = await db.admin<{ workspace_id: string; agent_run_id: string }[]>`
    select * from echodo_prunable_runs(make_interval(days => ${options.olderThanDays}))`;
  const plans: Plan[] = [];
  for (const { workspace_id, agent_run_id } of runs) {
    const plan = await withWorkspace(db.app, workspace_id, async (tx) => {
      const run = await getRun(tx, agent_run_id);
      if (!run) return undefined;
      const toDelete = await pruneRunCheckpoints(tx, agent_run_id, true); // dry: counts only
      return {
        run,
        toDelete,
        prunedCommits: await prunableCommits(tx, agent_run_id),
        kept: await latestCheckpoint(tx, agent_run_id),
      };
    });
    if (!plan) continue;
    const repoPath = plan.run.job.repoPath ?? options.repoRoot;
    const worktreeKept = await worktreeKeptReason(plan.run.worktree_path);
    plans.push({ workspaceId: workspace_id, ...plan, repoPath, worktreeKept });
  }
  const remote = await listRemote(plans, options);
  const remoteDone: Plan[] = [];
  for (const plan of plans) {
    report.runs++;
    if (!remote || (await pruneRemote(plan, remote, options, report))) remoteDone.push(plan);
  }
  for (const plan of await dropPrunedNotes(remoteDone, options, report)) {
    const deleted = options.dryRun
      ? plan.toDelete
      : await withWorkspace(db.app, plan.workspaceId, (tx) => pruneRunCheckpoints(tx, plan.run.id, false));
    report.rowsDeleted += deleted;
    const wt = plan.run.worktree_path;
    if (plan.worktreeKept) report.worktreesKept.push({ path: wt!, reason: plan.worktreeKept });
    else if (wt && existsSync(wt)) {
      if (!options.dryRun) await runGit(wt, ['worktree', 'remove', wt]);
      report.worktreesRemoved.push(wt);
    }
    if (removesBranch(plan, options)) await deleteLocalBranch(plan, options, report);
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

/** The operator asked for branch removal, and the run's worktree goes (a kept one keeps its branch). */
const removesBranch = (plan: Plan, options: PruneOptions) => !!options.deleteBranches && !plan.worktreeKept;

/** Has this run anything to change on the remote? (Rows to prune, or a branch to delete.) */
const wantsRemote = (plan: Plan, options: PruneOptions) =>
  !!plan.run.branch && (plan.toDelete > 0 || removesBranch(plan, options));

/**
 * The pruned checkpoints' notes leave WORKER_NOTES_REF (with branch removal the kept checkpoint's
 * too: its commit goes with the branch), in one rewrite per repository, before any of the runs'
 * rows go: a prune killed in between finds the runs still prunable and finishes them. Returns the
 * runs whose rows may go now; a repository whose notes ref could not be rewritten keeps its runs
 * as they are, for the next prune.
 */
async function dropPrunedNotes(plans: Plan[], options: PruneOptions, report: PruneReport): Promise<Plan[]> {
  if (options.dryRun) return plans;
  const byRepo = new Map<string, Plan[]>();
  for (const plan of plans) {
    if (!plan.repoPath || !existsSync(plan.repoPath)) continue; // no local repository, no local notes
    const repoPlans = byRepo.get(plan.repoPath) ?? [];
    repoPlans.push(plan);
    byRepo.set(plan.repoPath, repoPlans);
  }
  const failed = new Set<Plan>();
  for (const [repoPath, repoPlans] of byRepo) {
    const commits = repoPlans.flatMap((p) => [
      ...p.prunedCommits,
      ...(removesBranch(p, options) && p.kept?.commit_oid ? [p.kept.commit_oid] : []),
    ]);
    try {
      report.notesRemoved += await dropCheckpointNotes(repoPath, options.notesRef, commits);
    } catch (err) {
      const reason = redactString(`the notes under ${options.notesRef} could not be pruned: ${(err as Error).message}`);
      options.log.warn(
        { repoPath, reason },
        "prune: the pruned checkpoints' notes stay; their runs are left for the next prune",
      );
      for (const p of repoPlans) {
        failed.add(p);
        report.remotePending.push({ agentRunId: p.run.id, reason });
      }
    }
    // Killed here: the notes are gone, the rows not yet; the next prune deletes the rows.
    faultPoint('after-notes-prune');
  }
  return plans.filter((p) => !failed.has(p));
}

/** What the remote holds of the runs' refs, or why it could not be asked. */
interface RemoteState {
  present: Map<string, string>;
  unreachable?: string;
}

/**
 * One `git ls-remote` for every run's branch and notes ref. undefined: no remote configured. A
 * remote that cannot be reached marks every run that has something to do there as pending.
 */
async function listRemote(plans: Plan[], options: PruneOptions): Promise<RemoteState | undefined> {
  if (!options.remote) return undefined;
  const names = plans
    .filter((p) => wantsRemote(p, options))
    .flatMap((p) => [`refs/heads/${p.run.branch}`, runNotesRef(p.workspaceId, p.run.id)]);
  const cwd = options.repoRoot && existsSync(options.repoRoot) ? options.repoRoot : process.cwd();
  try {
    return { present: await remoteRefs(cwd, options.remote, names) };
  } catch (err) {
    const reason = redactString((err as Error).message);
    const what = 'prune: the checkpoint remote cannot be reached; runs with refs there are left for the next prune';
    options.log.warn({ error: reason }, what);
    return { present: new Map(), unreachable: reason };
  }
}

/** The run's refs on the remote pruned; false when they could not be (the run is then left as it is). */
async function pruneRemote(
  plan: Plan,
  remote: RemoteState,
  options: PruneOptions,
  report: PruneReport,
): Promise<boolean> {
  if (!wantsRemote(plan, options)) return true;
  const pending = (reason: string) => {
    report.remotePending.push({ agentRunId: plan.run.id, reason });
    const what =
      "prune: the run's refs on the checkpoint remote could not be pruned; its rows are kept for the next prune";
    options.log.warn({ agentRunId: plan.run.id, reason }, what);
    return false;
  };
  if (remote.unreachable) return pending(remote.unreachable);
  if (!plan.repoPath || !existsSync(plan.repoPath))
    return pending(`no local repository at ${plan.repoPath ?? '(unset)'} to push from`);
  const notesRef = runNotesRef(plan.workspaceId, plan.run.id);
  const remotePlan = {
    repoPath: plan.repoPath,
    remote: options.remote!,
    notesRef,
    branch: plan.run.branch!,
    kept: plan.kept ? [plan.kept] : [],
    rewriteNotes: plan.toDelete > 0,
    deleteBranch: !!options.deleteBranches && !plan.worktreeKept,
    present: remote.present,
  };
  if (options.dryRun) {
    report.remoteRefsUpdated.push(...describeDryRun(remotePlan));
    return true;
  }
  faultPoint('before-remote-prune');
  try {
    const result = await pruneRemoteRefs(remotePlan);
    // Killed here: the remote is pruned, the rows not yet; the run is still prunable and the next
    // prune does it again (the same kept note, or refs already gone: nothing to push).
    faultPoint('after-remote-prune');
    report.remoteRefsUpdated.push(...result.updated);
    // This host's copy of the run's notes ref follows the remote (a later push of it fast-forwards).
    if (result.notesCommit) await setLocalRef(plan.repoPath, notesRef, result.notesCommit);
    return true;
  } catch (err) {
    return pending(redactString((err as Error).message));
  }
}

function describeDryRun(plan: Omit<RemotePrunePlan, 'repoPath' | 'remote' | 'kept'>): string[] {
  const branchRef = `refs/heads/${plan.branch}`;
  if (plan.deleteBranch)
    return [branchRef, plan.notesRef].filter((r) => plan.present.has(r)).map((r) => `${r} -> deleted`);
  return plan.rewriteNotes && plan.present.has(plan.notesRef)
    ? [`${plan.notesRef} -> (the kept checkpoint's note only)`]
    : [];
}

/** Moves this host's copy of a ref, when it has one, to `oid`. */
export async function setLocalRef(repoPath: string, ref: string, oid: string): Promise<void> {
  const exists = await runGit(repoPath, ['rev-parse', '--verify', '--quiet', ref], { allowExitCodes: [1] });
  if (exists.exitCode === 0) await runGit(repoPath, ['update-ref', ref, oid]);
}

/** The run's branch and its notes ref in the local repository (its worktree is gone by now). */
async function deleteLocalBranch(plan: Plan, options: PruneOptions, report: PruneReport): Promise<void> {
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
