// Pruning runs to the rows retention keeps (store/retention.ts): the one path `npm run prune`
// (operator/prune.ts) and the storage sweep (operator/storage-sweep.ts) both take. Order, and why:
// with a checkpoint remote, the runs' refs there first (operator/prune-remote.ts); then the pruned
// checkpoints' notes leave WORKER_NOTES_REF (one rewrite per repository, its history squashed so
// that `git gc` can give their bytes back); only then the rows. A step that fails leaves its runs'
// rows in place, so they stay prunable and the next prune retries them. The other order would lose
// more: a note whose row is gone is never dropped by anything.
import { existsSync } from 'node:fs';
import { redactString } from '../core/redact.ts';
import type { Database } from '../store/connection.ts';
import { pruneRuns, prunedRows, type KeepRule, type PrunedRows, type RunSet } from '../store/retention.ts';
import { getRun, type RunRow } from '../store/runs.ts';
import { withWorkspace, type WorkspaceTx } from '../store/workspace.ts';
import { dropCheckpointNotes } from '../worker/checkpoints/notes.ts';
import { faultPoint } from '../worker/faults.ts';
import type { Logger } from '../worker/log.ts';
import { pruneOnRemote } from './prune-remote.ts';

/** One run to prune: what goes (PrunedRows), where its refs are, and whether its branch goes too. */
export interface RunPrune extends PrunedRows {
  workspaceId: string;
  run: RunRow;
  repoPath: string | undefined;
  /** `prune --delete-branches`, its worktree not kept: the branch, its notes ref and the kept notes go too. */
  deleteBranch: boolean;
}

export interface PruneSteps {
  keep: KeepRule;
  /** Who prunes, as the log and the reasons say it: `prune` or `storage sweep`. */
  who: string;
  log: Logger;
  /** WORKER_NOTES_REF: the pruned checkpoints' notes leave it. */
  notesRef: string;
  /** WORKER_CHECKPOINT_REMOTE: the runs' refs there are pruned first. */
  remote?: string;
  /** WORKER_REPO_ROOT: the repository of runs whose job named none. */
  repoRoot?: string;
  dryRun: boolean;
}

export interface PrunedRuns {
  /** The runs whose rows went (on a dry run, would go): the others are under `pending`. */
  done: RunPrune[];
  rowsDeleted: number;
  notesRemoved: number;
  /** Refs changed on the checkpoint remote (`<ref> -> <oid|deleted>`; on a dry run, what would be). */
  remoteRefsUpdated: string[];
  /** Runs left as they were because their refs could not be pruned: the next prune retries them. */
  pending: { agentRunId: string; reason: string }[];
}

/** The workspace's runs of the set, each with what a prune of it removes (prunedRows). */
export async function planPrunes(
  tx: WorkspaceTx,
  runs: RunSet,
  keep: KeepRule,
  repoRoot?: string,
): Promise<Omit<RunPrune, 'deleteBranch'>[]> {
  const pruned = new Map((await prunedRows(tx, runs, keep)).map((p) => [p.agentRunId, p]));
  const plans: Omit<RunPrune, 'deleteBranch'>[] = [];
  for (const agentRunId of Array.isArray(runs) ? runs : pruned.keys()) {
    const run = await getRun(tx, agentRunId);
    if (!run) continue;
    const rows = pruned.get(agentRunId) ?? { agentRunId, rows: 0, commits: [], keptCommits: [] };
    plans.push({ ...rows, workspaceId: tx.workspaceId, run, repoPath: run.job.repoPath ?? repoRoot });
  }
  return plans;
}

/** The runs pruned in order: their refs on the remote, their notes here, then their rows. */
export async function prunePlannedRuns(db: Database, plans: RunPrune[], steps: PruneSteps): Promise<PrunedRuns> {
  const out: PrunedRuns = { done: [], rowsDeleted: 0, notesRemoved: 0, remoteRefsUpdated: [], pending: [] };
  const remoteDone = steps.remote ? await pruneOnRemote(db, plans, steps, out) : plans;
  out.done = await dropPrunedNotes(remoteDone, steps, out);
  const byWorkspace = groupBy(out.done, (p) => p.workspaceId);
  for (const [workspaceId, wsPlans] of byWorkspace) {
    const ids = wsPlans.filter((p) => p.rows > 0).map((p) => p.run.id);
    out.rowsDeleted += steps.dryRun
      ? wsPlans.reduce((n, p) => n + p.rows, 0)
      : await withWorkspace(db.app, workspaceId, (tx) => pruneRuns(tx, ids, steps.keep));
  }
  return out;
}

/**
 * The pruned checkpoints' notes leave WORKER_NOTES_REF (with the branch, the kept ones' too: their
 * commits go with it), in one rewrite per repository. Returns the runs whose rows may go now; a
 * repository whose notes ref could not be rewritten keeps its runs as they are.
 */
async function dropPrunedNotes(plans: RunPrune[], steps: PruneSteps, out: PrunedRuns): Promise<RunPrune[]> {
  if (steps.dryRun) return plans;
  const local = plans.filter((p) => p.repoPath && existsSync(p.repoPath)); // no local repository, no local notes
  const failed = new Set<RunPrune>();
  for (const [repoPath, repoPlans] of groupBy(local, (p) => p.repoPath!)) {
    const commits = repoPlans.flatMap((p) => [...p.commits, ...(p.deleteBranch ? p.keptCommits : [])]);
    try {
      out.notesRemoved += await dropCheckpointNotes(repoPath, steps.notesRef, commits);
    } catch (err) {
      const reason = redactString(`the notes under ${steps.notesRef} could not be pruned: ${(err as Error).message}`);
      const what = `${steps.who}: the pruned checkpoints' notes stay; their runs are left for the next ${steps.who}`;
      steps.log.warn({ repoPath, reason }, what);
      for (const p of repoPlans) {
        failed.add(p);
        out.pending.push({ agentRunId: p.run.id, reason });
      }
    }
    // Killed here: the notes are gone, the rows not yet; the next prune deletes the rows.
    faultPoint('after-notes-prune');
  }
  return plans.filter((p) => !failed.has(p));
}

function groupBy<T>(items: T[], key: (item: T) => string): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const item of items) groups.set(key(item), [...(groups.get(key(item)) ?? []), item]);
  return groups;
}
