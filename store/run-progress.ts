// What an AG-UI stream of a run reads as the run goes (mission-control/routes-ag-ui.ts): its status,
// the checkpoints after the last one sent, the lifecycle events after the last one sent.
import type { WorkspaceTx } from './workspace.ts';

export interface ProgressRun {
  status: string;
  failure_reason: string | null;
}

export interface ProgressCheckpoint {
  checkpoint_seq: number;
  step: number;
  tool_history: { round: number; tool: string; input: unknown; ok: boolean; result?: unknown; error?: string }[];
  files_touched: { path: string; sha256: string | null }[];
  commit_oid: string | null;
  hash: string;
}

export interface ProgressEvent {
  id: string;
  type: string;
  metadata: Record<string, unknown> | null;
}

export async function progressRun(tx: WorkspaceTx, agentRunId: string): Promise<ProgressRun | undefined> {
  const [row] = await tx<ProgressRun[]>`select status, failure_reason from agent_runs where id = ${agentRunId}`;
  return row;
}

export async function checkpointsAfter(
  tx: WorkspaceTx,
  agentRunId: string,
  seq: number,
): Promise<ProgressCheckpoint[]> {
  return tx<ProgressCheckpoint[]>`
    select checkpoint_seq, step, tool_history, files_touched, commit_oid, hash from worker_checkpoints
     where workspace_id = ${tx.workspaceId} and agent_run_id = ${agentRunId} and checkpoint_seq > ${seq}
     order by checkpoint_seq limit 50`;
}

/** The events a client is told of as CUSTOM events (a crash is not an error to the client). */
export async function lifecycleEventsAfter(tx: WorkspaceTx, agentRunId: string, id: string): Promise<ProgressEvent[]> {
  return tx<ProgressEvent[]>`
    select id::text, type, metadata from convoy_events
     where workspace_id = ${tx.workspaceId} and agent_run_id = ${agentRunId} and id > ${id}::bigint
       and type in ('run_resumed', 'run_redispatched')
     order by id limit 50`;
}
