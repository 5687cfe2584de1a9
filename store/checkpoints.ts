// worker_checkpoints: the source of truth of a run's progress. checkpoint_manifest: the run's
// current manifest (every path it ever touched, with its sha256), written with each row.
import type { ChainRow, FileTouched } from '../core/checkpoint-hash.ts';
import type { WorkspaceTx } from './workspace.ts';

export interface CheckpointRow extends ChainRow {
  id: string;
  convoy_id: string;
  brief_id: string;
  attempt: number;
  lease_epoch: number;
  occurred_at: Date;
  /** A remote agent's thread and state as of this checkpoint (worker/adapters/); null otherwise. */
  agent_state?: Record<string, unknown> | null;
}

export interface NewCheckpoint {
  agentRunId: string;
  convoyId: string;
  briefId: string;
  checkpointSeq: number;
  step: number;
  attempt: number;
  /** This checkpoint's own (redacted) tool calls. */
  toolHistory: unknown[];
  /** This checkpoint's changed files; sha256 null for a deletion. */
  filesTouched: FileTouched[];
  branch: string | null;
  worktreePath: string | null;
  commitOid: string | null;
  treeOid: string | null;
  manifestDigest: string;
  manifestCount: number;
  prevHash: string | null;
  hash: string;
  /** The usage of this checkpoint's rounds as reported (null counts: not reported); absent: none known. */
  usage?: CheckpointUsage;
  /** A remote agent's thread and state (bounded, redacted by the adapter); absent for the minimal loop. */
  agentState?: object;
}

/** Token counts of a checkpoint's rounds; null where the provider did not report one. */
export interface CheckpointUsage {
  inputTokens: number | null;
  outputTokens: number | null;
  cacheReadTokens: number | null;
  cacheWriteTokens: number | null;
  reasoningTokens: number | null;
  modelId: string | null;
}

/** One entry of a run's manifest. */
export interface ManifestEntry {
  path: string;
  /** null: the run deleted it. */
  sha256: string | null;
  /** The checkpoint that last changed it. */
  seq: number;
}

/**
 * The commit point of a checkpoint. One statement: renew the lease only if it is still ours
 * (fencing on lease_epoch), insert the row only if that renewal happened, and upsert this
 * checkpoint's files into the manifest in the same breath (so the manifest and the latest row's
 * digest always agree). Returns undefined when fenced off. A duplicate seq fails on the unique key.
 */
export async function appendCheckpoint(
  tx: WorkspaceTx,
  cp: NewCheckpoint,
  lease: { leaseEpoch: number; leaseMs: number },
): Promise<{ id: string; occurred_at: Date } | undefined> {
  const paths = cp.filesTouched.map((f) => f.path);
  const shas = cp.filesTouched.map((f) => f.sha256);
  const u = cp.usage;
  const [row] = await tx<{ id: string; occurred_at: Date }[]>`
    with lease as (
      update agent_runs
         set heartbeat_at = now(), lease_expires_at = now() + make_interval(secs => ${lease.leaseMs / 1000}), step = ${cp.step}
       where workspace_id = ${tx.workspaceId} and id = ${cp.agentRunId} and lease_epoch = ${lease.leaseEpoch} and status = 'running'
      returning id
    ), cp as (
      insert into worker_checkpoints (workspace_id, agent_run_id, convoy_id, brief_id, checkpoint_seq, step, attempt,
                                      lease_epoch, tool_history, files_touched, branch, worktree_path, commit_oid,
                                      payload_format, tree_oid, manifest_digest, manifest_count, prev_hash, hash,
                                      model_id, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
                                      reasoning_tokens, agent_state)
      select ${tx.workspaceId}, lease.id, ${cp.convoyId}, ${cp.briefId}, ${cp.checkpointSeq}, ${cp.step}, ${cp.attempt},
             ${lease.leaseEpoch}, ${tx.json(cp.toolHistory as never)}, ${tx.json(cp.filesTouched as never)}, ${cp.branch},
             ${cp.worktreePath}, ${cp.commitOid}, 3, ${cp.treeOid}, ${cp.manifestDigest}, ${cp.manifestCount},
             ${cp.prevHash}, ${cp.hash}, ${u?.modelId ?? null}, ${u?.inputTokens ?? null}, ${u?.outputTokens ?? null},
             ${u?.cacheReadTokens ?? null}, ${u?.cacheWriteTokens ?? null}, ${u?.reasoningTokens ?? null},
             ${cp.agentState ? tx.json(cp.agentState as never) : null}
        from lease
      returning id, occurred_at
    ), manifest as (
      insert into checkpoint_manifest (workspace_id, agent_run_id, path, sha256, seq)
      select ${tx.workspaceId}, ${cp.agentRunId}, f.path, decode(f.sha256, 'hex'), ${cp.checkpointSeq}
        from cp, unnest(${paths}::text[], ${shas}::text[]) as f(path, sha256)
      on conflict (workspace_id, agent_run_id, path) do update set sha256 = excluded.sha256, seq = excluded.seq
    )
    select id, occurred_at from cp`;
  return row;
}

export async function latestCheckpoint(tx: WorkspaceTx, agentRunId: string): Promise<CheckpointRow | undefined> {
  const [row] = await tx<CheckpointRow[]>`
    select * from worker_checkpoints where workspace_id = ${tx.workspaceId} and agent_run_id = ${agentRunId}
     order by checkpoint_seq desc limit 1`;
  return row;
}

/** Every checkpoint of a run in seq order, for chain verification. */
export async function checkpointChain(tx: WorkspaceTx, agentRunId: string): Promise<CheckpointRow[]> {
  return tx<CheckpointRow[]>`
    select * from worker_checkpoints where workspace_id = ${tx.workspaceId} and agent_run_id = ${agentRunId}
     order by checkpoint_seq`;
}

/** The last `n` checkpoints of a run in seq order: what a resume needs (the latest row, the history window). */
export async function checkpointTail(tx: WorkspaceTx, agentRunId: string, n: number): Promise<CheckpointRow[]> {
  return tx<CheckpointRow[]>`
    select * from (
      select * from worker_checkpoints where workspace_id = ${tx.workspaceId} and agent_run_id = ${agentRunId}
       order by checkpoint_seq desc limit ${n}
    ) tail order by checkpoint_seq`;
}

export async function checkpointAt(
  tx: WorkspaceTx,
  agentRunId: string,
  seq: number,
): Promise<CheckpointRow | undefined> {
  const [row] = await tx<CheckpointRow[]>`
    select * from worker_checkpoints
     where workspace_id = ${tx.workspaceId} and agent_run_id = ${agentRunId} and checkpoint_seq = ${seq}`;
  return row;
}

/** The run's whole manifest as of its latest checkpoint: every path it ever touched, by path. */
export async function runManifest(tx: WorkspaceTx, agentRunId: string): Promise<ManifestEntry[]> {
  return tx<ManifestEntry[]>`
    select path, encode(sha256, 'hex') as sha256, seq from checkpoint_manifest
     where workspace_id = ${tx.workspaceId} and agent_run_id = ${agentRunId}
     order by path collate "C"`;
}
