// Cancel, the worker's side: once its run stops at a tool boundary after an operator's request
// (operator/cancel.ts records it), the worker marks the run cancelled and releases its worktree.
import { existsSync } from 'node:fs';
import type { Database } from '../../store/connection.ts';
import { cancelHeldRun, markBriefDone } from '../../store/operator-actions.ts';
import { appendEvent, type RunRow } from '../../store/runs.ts';
import { withWorkspace } from '../../store/workspace.ts';
import { redactString } from '../../core/redact.ts';
import { errorMessage } from '../../core/errors.ts';
import { faultPoint } from '../faults.ts';
import { runGit } from '../git/run-git.ts';
import type { Logger } from '../log.ts';

/** Who asked, as stored and shown: 'cli', 'api:<tokenId>', … (redacted, bounded). */
export function actorLabel(by: string): string {
  return redactString(by).slice(0, 200);
}

/**
 * The worker's side, after its last checkpoint: mark the run cancelled (only the lease holder
 * can), record who asked, and remove the worktree (the branch keeps every checkpoint commit).
 */
export async function finishCancelledRun(args: {
  db: Database;
  run: RunRow;
  by: string;
  seq: number;
  step: number;
  repoPath: string;
  worktreePath: string | null;
  log: Logger;
}): Promise<boolean> {
  const { run, log } = args;
  faultPoint('after-cancel-request');
  const done = await withWorkspace(args.db.app, run.workspace_id, async (tx) => {
    const cancelled = await cancelHeldRun(tx, { agentRunId: run.id, leaseEpoch: run.lease_epoch });
    if (!cancelled) return false;
    await markBriefDone(tx, run.brief_id);
    await appendEvent(tx, {
      convoyId: run.convoy_id,
      agentRunId: run.id,
      type: 'run_cancelled',
      metadata: { by: actorLabel(args.by), immediate: false, lastSeq: args.seq, step: args.step, attempt: run.attempt },
    });
    return true;
  });
  if (!done) return false;
  if (args.worktreePath) await releaseWorktree(args.repoPath, args.worktreePath, log);
  log.info({ by: args.by, seq: args.seq, step: args.step }, 'run cancelled: last checkpoint kept, worktree released');
  return true;
}

/** Removes a finished run's worktree; its branch and notes stay (integrity-check verifies by branch). */
export async function releaseWorktree(repoPath: string, worktreePath: string, log: Logger): Promise<void> {
  if (!existsSync(worktreePath)) return;
  try {
    await runGit(repoPath, ['-c', 'core.hooksPath=/dev/null', 'worktree', 'remove', '--force', worktreePath]);
  } catch (err) {
    log.warn(
      { worktreePath, error: errorMessage(err) },
      'could not remove the worktree of the cancelled run; leaving it',
    );
  }
}
