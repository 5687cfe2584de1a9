// Operator actions in SQL: cancel requests and their effect, fork records. One query per
// function; every state change is a compare-and-set on lease_epoch, so a cancel and a worker's
// own completion (or a stall detector's re-dispatch) cannot both win.
import type { RunRow } from './runs.ts';
import type { WorkspaceTx } from './workspace.ts';

export interface LeaseView {
  held: boolean;
  /** Who asked for a cancel (e.g. 'cli', 'api:<tokenId>'), null when nobody did. */
  cancelRequestedBy: string | null;
}

/** The heartbeat: renews the lease if it is still ours, and says whether a cancel was asked. */
export async function heartbeatWithCancel(
  tx: WorkspaceTx,
  args: { agentRunId: string; leaseEpoch: number; leaseMs: number },
): Promise<LeaseView> {
  const [row] = await tx<{ by: string | null; asked: boolean }[]>`
    update agent_runs set heartbeat_at = now(), lease_expires_at = now() + make_interval(secs => ${args.leaseMs / 1000})
     where id = ${args.agentRunId} and lease_epoch = ${args.leaseEpoch} and status = 'running'
    returning cancel_requested_by as by, cancel_requested_at is not null as asked`;
  return { held: !!row, cancelRequestedBy: row?.asked ? (row.by ?? 'unknown') : null };
}

/** The fencing check before a tool call: is the lease still ours, and was a cancel asked? */
export async function leaseView(tx: WorkspaceTx, args: { agentRunId: string; leaseEpoch: number }): Promise<LeaseView> {
  const [row] = await tx<{ by: string | null; asked: boolean }[]>`
    select cancel_requested_by as by, cancel_requested_at is not null as asked from agent_runs
     where id = ${args.agentRunId} and lease_epoch = ${args.leaseEpoch} and status = 'running'`;
  return { held: !!row, cancelRequestedBy: row?.asked ? (row.by ?? 'unknown') : null };
}

/**
 * Cancels at once a run nobody is working on: queued, or running with an expired lease (its
 * worker is dead or cut off). Bumping the epoch fences that worker should it come back.
 */
export async function cancelIdleRun(
  tx: WorkspaceTx,
  args: { agentRunId: string; leaseEpoch: number; by: string },
): Promise<RunRow | undefined> {
  const [run] = await tx<RunRow[]>`
    update agent_runs
       set status = 'cancelled', finished_at = now(), lease_epoch = lease_epoch + 1, lease_expires_at = null,
           worker_id = null, cancel_requested_at = coalesce(cancel_requested_at, now()),
           cancel_requested_by = coalesce(cancel_requested_by, ${args.by})
     where id = ${args.agentRunId} and lease_epoch = ${args.leaseEpoch}
       and (status = 'queued' or (status = 'running' and (lease_expires_at is null or lease_expires_at < now())))
    returning *`;
  return run;
}

/** Records a cancel request on a run whose worker is alive; the worker acts on it at its next tool boundary. */
export async function markCancelRequested(
  tx: WorkspaceTx,
  args: { agentRunId: string; leaseEpoch: number; by: string },
): Promise<RunRow | undefined> {
  const [run] = await tx<RunRow[]>`
    update agent_runs
       set cancel_requested_at = coalesce(cancel_requested_at, now()),
           cancel_requested_by = coalesce(cancel_requested_by, ${args.by})
     where id = ${args.agentRunId} and lease_epoch = ${args.leaseEpoch} and status = 'running'
    returning *`;
  return run;
}

/** The worker's side: the lease holder ends its run as cancelled (after its last checkpoint). */
export async function cancelHeldRun(
  tx: WorkspaceTx,
  args: { agentRunId: string; leaseEpoch: number },
): Promise<RunRow | undefined> {
  const [run] = await tx<RunRow[]>`
    update agent_runs set status = 'cancelled', finished_at = now(), lease_expires_at = null
     where id = ${args.agentRunId} and lease_epoch = ${args.leaseEpoch} and status = 'running'
    returning *`;
  return run;
}

export async function markBriefDone(tx: WorkspaceTx, briefId: string): Promise<void> {
  await tx`update briefs set status = 'done', completed_at = now() where id = ${briefId} and status <> 'done'`;
}

/** Marks a freshly recorded run as a fork of (run, seq), with what it starts from. */
export async function recordForkOrigin(
  tx: WorkspaceTx,
  args: {
    agentRunId: string;
    fromRun: string;
    fromSeq: number;
    baseOid: string;
    seed: { step: number; hash: string; commitOid: string | null; history: unknown[] };
  },
): Promise<void> {
  await tx`update agent_runs
              set forked_from_run = ${args.fromRun}, forked_from_seq = ${args.fromSeq}, base_oid = ${args.baseOid},
                  step = ${args.seed.step}, fork_seed = ${tx.json(args.seed as never)}
            where id = ${args.agentRunId} and status = 'queued'`;
}

/** The fork's chain starts from an anchor: the hash of the source checkpoint it was made from. */
export async function recordForkAnchor(tx: WorkspaceTx, args: { agentRunId: string; hash: string }): Promise<void> {
  await tx`insert into checkpoint_anchors (workspace_id, agent_run_id, anchor_seq, anchor_hash, origin_hash)
           values (${tx.workspaceId}, ${args.agentRunId}, 0, ${args.hash}, ${args.hash})`;
}

/** The lowest checkpoint seq a pruned run still has (its anchor's seq + 1), or undefined if never pruned. */
export async function prunedBelow(tx: WorkspaceTx, agentRunId: string): Promise<number | undefined> {
  const [row] = await tx<{ seq: number; pruned_at: Date }[]>`
    select anchor_seq as seq, pruned_at from checkpoint_anchors where agent_run_id = ${agentRunId} and anchor_seq > 0`;
  return row ? row.seq + 1 : undefined;
}
