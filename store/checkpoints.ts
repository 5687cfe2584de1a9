// worker_checkpoints: the source of truth of a run's progress.
import type { ChainRow, FileTouched } from '../worker/checkpoints/hash.ts';
import type { WorkspaceTx } from './workspace.ts';

export interface CheckpointRow extends ChainRow {
  id: string;
  convoy_id: string;
  brief_id: string;
  attempt: number;
  lease_epoch: number;
  occurred_at: Date;
}

export interface NewCheckpoint {
  agentRunId: string;
  convoyId: string;
  briefId: string;
  checkpointSeq: number;
  step: number;
  attempt: number;
  toolHistory: unknown[];
  filesTouched: FileTouched[];
  branch: string | null;
  worktreePath: string | null;
  commitOid: string | null;
  prevHash: string | null;
  hash: string;
}

/**
 * The commit point of a checkpoint. One statement: renew the lease only if it is still ours
 * (fencing on lease_epoch) and insert the row only if that renewal happened. Returns undefined
 * when fenced off. A duplicate seq fails on the unique (agent_run_id, checkpoint_seq).
 */
export async function appendCheckpoint(
  tx: WorkspaceTx,
  cp: NewCheckpoint,
  lease: { leaseEpoch: number; leaseMs: number },
): Promise<{ id: string; occurred_at: Date } | undefined> {
  const [row] = await tx<{ id: string; occurred_at: Date }[]>`
    with lease as (
      update agent_runs
         set heartbeat_at = now(), lease_expires_at = now() + make_interval(secs => ${lease.leaseMs / 1000}), step = ${cp.step}
       where id = ${cp.agentRunId} and lease_epoch = ${lease.leaseEpoch} and status = 'running'
      returning id
    )
    insert into worker_checkpoints (workspace_id, agent_run_id, convoy_id, brief_id, checkpoint_seq, step, attempt,
                                    lease_epoch, tool_history, files_touched, branch, worktree_path, commit_oid, prev_hash, hash)
    select ${tx.workspaceId}, lease.id, ${cp.convoyId}, ${cp.briefId}, ${cp.checkpointSeq}, ${cp.step}, ${cp.attempt},
           ${lease.leaseEpoch}, ${tx.json(cp.toolHistory as never)}, ${tx.json(cp.filesTouched as never)}, ${cp.branch},
           ${cp.worktreePath}, ${cp.commitOid}, ${cp.prevHash}, ${cp.hash}
      from lease
    returning id, occurred_at`;
  return row;
}

export async function latestCheckpoint(tx: WorkspaceTx, agentRunId: string): Promise<CheckpointRow | undefined> {
  const [row] = await tx<CheckpointRow[]>`
    select * from worker_checkpoints where agent_run_id = ${agentRunId} order by checkpoint_seq desc limit 1`;
  return row;
}

/** Every checkpoint of a run in seq order, for chain verification. */
export async function checkpointChain(tx: WorkspaceTx, agentRunId: string): Promise<CheckpointRow[]> {
  return tx<CheckpointRow[]>`select * from worker_checkpoints where agent_run_id = ${agentRunId} order by checkpoint_seq`;
}

export async function checkpointAt(tx: WorkspaceTx, agentRunId: string, seq: number): Promise<CheckpointRow | undefined> {
  const [row] = await tx<CheckpointRow[]>`
    select * from worker_checkpoints where agent_run_id = ${agentRunId} and checkpoint_seq = ${seq}`;
  return row;
}
