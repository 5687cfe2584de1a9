// Cancel: an operator's request to stop a run for good. A run nobody is working on (queued, or
// its worker dead: the lease expired) is cancelled at once by the request; a live run gets the
// request recorded, and its worker stops at the next tool boundary (worker/run/lease.ts sees it at a
// heartbeat or the fencing check before a tool call), checkpoints, releases its worktree, and
// marks the run `cancelled` itself (finishCancelledRun).
import type { Database } from '../store/connection.ts';
import { cancelIdleRun, markBriefDone, markCancelRequested } from '../store/operator-actions.ts';
import { appendEvent, getRun, type RunRow, type RunStatus } from '../store/runs.ts';
import { withWorkspace } from '../store/workspace.ts';
import { EchodoError } from '../core/errors.ts';
import { actorLabel, releaseWorktree } from '../worker/run/cancelled.ts';
import type { Logger } from '../worker/log.ts';

export interface CancelAnswer {
  agentRunId: string;
  status: RunStatus;
  /** true: cancelled now (nobody was working on it); false: its worker stops at the next tool boundary. */
  immediate: boolean;
  cancelRequestedBy: string;
}

export async function requestCancel(
  db: Database,
  workspaceId: string,
  agentRunId: string,
  by: string,
  options: { repoRoot?: string; log?: Logger } = {},
): Promise<CancelAnswer> {
  const actor = actorLabel(by);
  let released: RunRow | undefined;
  // Two tries: a run whose state moved between the read and the compare-and-set is read again.
  for (let attempt = 0; attempt < 3; attempt++) {
    const answer = await withWorkspace(db.app, workspaceId, async (tx): Promise<CancelAnswer | 'retry'> => {
      const run = await getRun(tx, agentRunId);
      if (!run) throw new EchodoError('run_not_found', `run ${agentRunId} not found in workspace ${workspaceId}`);
      if (run.status === 'cancelled') {
        return {
          agentRunId,
          status: 'cancelled',
          immediate: true,
          cancelRequestedBy: run.cancel_requested_by ?? actor,
        };
      }
      if (run.status === 'completed' || run.status === 'failed') {
        throw new EchodoError(
          'action_refused',
          `run ${agentRunId} is already ${run.status}; only a queued or running run can be cancelled`,
        );
      }
      const idle = await cancelIdleRun(tx, { agentRunId, leaseEpoch: run.lease_epoch, by: actor });
      if (idle) {
        released = run;
        await markBriefDone(tx, idle.brief_id);
        const why = run.status === 'queued' ? 'queued: no worker had it' : 'its worker is gone (lease expired)';
        await appendEvent(tx, {
          convoyId: idle.convoy_id,
          agentRunId,
          type: 'run_cancelled',
          metadata: { by: actor, immediate: true, reason: why, step: idle.step, attempt: idle.attempt },
        });
        return { agentRunId, status: 'cancelled', immediate: true, cancelRequestedBy: actor };
      }
      const live = await markCancelRequested(tx, { agentRunId, leaseEpoch: run.lease_epoch, by: actor });
      if (!live) return 'retry';
      return {
        agentRunId,
        status: live.status,
        immediate: false,
        cancelRequestedBy: live.cancel_requested_by ?? actor,
      };
    });
    if (answer === 'retry') continue;
    // A dead worker's worktree, when it is on this host: released like a live worker does.
    if (released?.worktree_path && options.repoRoot && options.log) {
      await releaseWorktree(released.job.repoPath ?? options.repoRoot, released.worktree_path, options.log);
    }
    return answer;
  }
  throw new EchodoError('action_refused', `run ${agentRunId} kept changing state; try the cancel again`);
}
