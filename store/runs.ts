// agent_runs and briefs: one query per function. Every function takes a workspace-scoped
// transaction; completion and failure only ever happen `where lease_epoch = $mine`.
import type { Job } from '../core/job.ts';
import type { WorkspaceTx } from './workspace.ts';
import { redactValue, storableText } from '../core/redact.ts';

// Redaction at the store boundary (docs/security.md): every reason and event written here
// passes the one redaction function, so no caller can forget it.
const REASON_MAX_CHARS = 2000;

export type RunStatus = 'queued' | 'running' | 'completed' | 'failed' | 'cancelled' | 'budget_exhausted';

export interface RunRow {
  id: string;
  workspace_id: string;
  convoy_id: string;
  brief_id: string;
  job_id: string;
  job: Job;
  harness_alias: string | null;
  status: RunStatus;
  attempt: number;
  lease_epoch: number;
  worker_id: string | null;
  heartbeat_at: Date | null;
  lease_expires_at: Date | null;
  step: number;
  branch: string | null;
  worktree_path: string | null;
  base_oid: string | null;
  failure_reason: string | null;
  created_at: Date;
  finished_at: Date | null;
  /** The host (WORKER_HOST_ID) that recorded worktree_path (migration 012); null before it. */
  host_id?: string | null;
  /** Operator actions (migration 009): a cancel asked for, and where a fork started. */
  cancel_requested_at?: Date | null;
  cancel_requested_by?: string | null;
  forked_from_run?: string | null;
  forked_from_seq?: number | null;
  fork_seed?: {
    step: number;
    hash: string;
    commitOid: string | null;
    history: unknown[];
    agentState?: Record<string, unknown> | null;
  } | null;
}

export async function workspaceExists(tx: WorkspaceTx): Promise<boolean> {
  const rows = await tx`select 1 from workspaces where workspace_id = ${tx.workspaceId}`;
  return rows.length > 0;
}

export async function createWorkspace(tx: WorkspaceTx, name?: string): Promise<void> {
  await tx`insert into workspaces (workspace_id, name) values (${tx.workspaceId}, ${name ?? tx.workspaceId})
           on conflict (workspace_id) do nothing`;
}

/**
 * Records the run of a job (with its convoy and brief) unless the job was recorded before.
 * Idempotent on jobId: returns the existing run's id when there is one.
 */
export async function recordRun(tx: WorkspaceTx, job: Job): Promise<{ agentRunId: string; created: boolean }> {
  await tx`insert into convoys (workspace_id, id) values (${tx.workspaceId}, ${job.convoyId}) on conflict do nothing`;
  await tx`insert into briefs (workspace_id, id, convoy_id, role_id)
           values (${tx.workspaceId}, ${job.briefId}, ${job.convoyId}, ${job.roleId}) on conflict do nothing`;
  const inserted = await tx<{ id: string }[]>`
    insert into agent_runs (id, workspace_id, convoy_id, brief_id, job_id, job, harness_alias)
    values (${job.agentRunId}, ${tx.workspaceId}, ${job.convoyId}, ${job.briefId}, ${job.jobId},
            ${tx.json(redactValue(job, Infinity) as never)}, ${job.harnessAlias ?? null})
    on conflict (workspace_id, job_id) do nothing
    returning id`;
  if (inserted.length) return { agentRunId: inserted[0]!.id, created: true };
  // Ids are unique per workspace (migration 005): a run of another workspace neither conflicts nor is found here.
  const [existing] = await tx<
    { id: string }[]
  >`select id from agent_runs where workspace_id = ${tx.workspaceId} and job_id = ${job.jobId}`;
  if (!existing)
    throw new Error(`run for job ${job.jobId} could not be recorded (agentRunId ${job.agentRunId} taken?)`);
  return { agentRunId: existing.id, created: false };
}

export async function getRun(tx: WorkspaceTx, agentRunId: string): Promise<RunRow | undefined> {
  const [row] = await tx<RunRow[]>`select * from agent_runs where id = ${agentRunId}`;
  return row;
}

/**
 * Compare-and-set claim of a queued run: bumps lease_epoch (the fencing token), sets the lease,
 * and marks the brief claimed. Returns undefined when someone else has it or it is finished.
 */
export async function claimRun(
  tx: WorkspaceTx,
  args: { agentRunId: string; workerId: string; leaseMs: number },
): Promise<RunRow | undefined> {
  const [run] = await tx<RunRow[]>`
    update agent_runs
       set status = 'running', lease_epoch = lease_epoch + 1, worker_id = ${args.workerId},
           heartbeat_at = now(), lease_expires_at = now() + make_interval(secs => ${args.leaseMs / 1000}),
           started_at = coalesce(started_at, now())
     where id = ${args.agentRunId} and status = 'queued'
    returning *`;
  if (!run) return undefined;
  // A brief in review or published holds another run's finished work: a claim leaves it be.
  await tx`update briefs set status = 'claimed', claimed_by_run = ${run.id}, claimed_at = now()
            where id = ${run.brief_id} and status in ('open', 'claimed')`;
  return run;
}

/** Renews the lease if it is still ours. Returns false when the run was taken over or finished. */
export async function heartbeatRun(
  tx: WorkspaceTx,
  args: { agentRunId: string; leaseEpoch: number; leaseMs: number },
): Promise<boolean> {
  const rows = await tx`
    update agent_runs set heartbeat_at = now(), lease_expires_at = now() + make_interval(secs => ${args.leaseMs / 1000})
     where id = ${args.agentRunId} and lease_epoch = ${args.leaseEpoch} and status = 'running'
    returning 1`;
  return rows.length > 0;
}

/** The fencing check before a tool call: is the lease still ours? */
export async function holdsLease(tx: WorkspaceTx, args: { agentRunId: string; leaseEpoch: number }): Promise<boolean> {
  const rows = await tx`select 1 from agent_runs
                         where id = ${args.agentRunId} and lease_epoch = ${args.leaseEpoch} and status = 'running'`;
  return rows.length > 0;
}

export async function setRunWorkspace(
  tx: WorkspaceTx,
  args: {
    agentRunId: string;
    leaseEpoch: number;
    harnessAlias: string;
    /** The harness's adapter as the run was claimed with it (the run page shows this one). */
    adapter?: string;
    branch: string | null;
    worktreePath: string | null;
    baseOid: string | null;
    hostId?: string | null;
  },
): Promise<boolean> {
  // The host goes with the path (migration 012): a worktree path means something only on its host.
  const rows = await tx`
    update agent_runs set harness_alias = ${args.harnessAlias}, adapter = coalesce(${args.adapter ?? null}, adapter),
           branch = ${args.branch},
           worktree_path = ${args.worktreePath}, base_oid = coalesce(base_oid, ${args.baseOid}),
           host_id = ${args.hostId ?? null}
     where id = ${args.agentRunId} and lease_epoch = ${args.leaseEpoch} and status = 'running'
    returning 1`;
  return rows.length > 0;
}

/** Completes the run and its brief (with the usage of its final text-only answer); only the lease holder can. */
export async function completeRun(
  tx: WorkspaceTx,
  args: { agentRunId: string; leaseEpoch: number; finalUsage?: object },
): Promise<boolean> {
  const [run] = await tx<{ brief_id: string }[]>`
    update agent_runs set status = 'completed', finished_at = now(), lease_expires_at = null,
           final_usage = ${args.finalUsage ? tx.json(args.finalUsage as never) : null}
     where id = ${args.agentRunId} and lease_epoch = ${args.leaseEpoch} and status = 'running'
    returning brief_id`;
  if (!run) return false;
  await tx`update briefs set status = 'done', completed_at = now() where id = ${run.brief_id}`;
  return true;
}

/** Fails the run with a reason; only the lease holder can. The brief is done either way. */
export async function failRun(
  tx: WorkspaceTx,
  args: { agentRunId: string; leaseEpoch: number; reason: string },
): Promise<boolean> {
  const [run] = await tx<{ brief_id: string }[]>`
    update agent_runs set status = 'failed', failure_reason = ${storableText(args.reason, REASON_MAX_CHARS)}, finished_at = now(), lease_expires_at = null
     where id = ${args.agentRunId} and lease_epoch = ${args.leaseEpoch} and status = 'running'
    returning brief_id`;
  if (!run) return false;
  await tx`update briefs set status = 'done', completed_at = now() where id = ${run.brief_id}`;
  return true;
}

/** Fails a run that was never claimed (bad job found before claim). */
export async function failQueuedRun(tx: WorkspaceTx, args: { agentRunId: string; reason: string }): Promise<boolean> {
  const rows = await tx`
    update agent_runs set status = 'failed', failure_reason = ${storableText(args.reason, REASON_MAX_CHARS)}, finished_at = now()
     where id = ${args.agentRunId} and status = 'queued'
    returning 1`;
  return rows.length > 0;
}

/**
 * Hands a run back to the queue: on SIGTERM by its holder (same attempt), or by the stall
 * detector (attempt + 1, resumeFromCheckpoint). Bumping the epoch fences the previous holder.
 */
export async function requeueRun(
  tx: WorkspaceTx,
  args: { agentRunId: string; leaseEpoch: number; nextAttempt: boolean },
): Promise<RunRow | undefined> {
  const [run] = await tx<RunRow[]>`
    update agent_runs
       set status = 'queued', lease_epoch = lease_epoch + 1, worker_id = null, lease_expires_at = null,
           attempt = attempt + ${args.nextAttempt ? 1 : 0}, available_at = now(),
           queued_at = case when status = 'queued' then queued_at else now() end,
           job = job || jsonb_build_object('agentRunId', id, 'resumeFromCheckpoint', true)
     where id = ${args.agentRunId} and lease_epoch = ${args.leaseEpoch} and status in ('running', 'queued')
    returning *`;
  return run;
}

/** A run as a re-dispatch decision sees it: locked, with its lease judged by the database's clock. */
export type LockedRun = RunRow & { lease_live: boolean };

/** Locks a run of this workspace by id for a re-dispatch decision (worker/run/admission.ts). */
export async function lockRunById(tx: WorkspaceTx, agentRunId: string): Promise<LockedRun | undefined> {
  const [row] = await tx<LockedRun[]>`
    select *, coalesce(lease_expires_at > now(), false) as lease_live from agent_runs
     where workspace_id = ${tx.workspaceId} and id = ${agentRunId} for update`;
  return row;
}

/** Locks the run a jobId was recorded as (a redelivery of the same message). */
export async function lockRunByJobId(tx: WorkspaceTx, jobId: string): Promise<LockedRun | undefined> {
  const [row] = await tx<LockedRun[]>`
    select *, coalesce(lease_expires_at > now(), false) as lease_live from agent_runs
     where workspace_id = ${tx.workspaceId} and job_id = ${jobId} for update`;
  return row;
}

/**
 * Re-dispatch, as the stall detector does it: attempt + 1, the epoch bumped (fencing any
 * previous holder), queued again with resumeFromCheckpoint. Only from one of `from` and only
 * `where lease_epoch = $seen`. A failed run's finish is undone; its reason goes in the event.
 */
export async function redispatchRun(
  tx: WorkspaceTx,
  args: { agentRunId: string; leaseEpoch: number; from: RunStatus[] },
): Promise<RunRow | undefined> {
  const [run] = await tx<RunRow[]>`
    update agent_runs
       set status = 'queued', lease_epoch = lease_epoch + 1, worker_id = null, lease_expires_at = null,
           attempt = attempt + 1, available_at = now(), queued_at = now(), finished_at = null, failure_reason = null,
           job = job || jsonb_build_object('agentRunId', id, 'resumeFromCheckpoint', true)
     where workspace_id = ${tx.workspaceId} and id = ${args.agentRunId} and lease_epoch = ${args.leaseEpoch}
       and status = any(${args.from})
    returning *`;
  return run;
}

/** A failed run's brief was marked done; re-dispatching it opens the brief again (unless another run did it). */
export async function reopenBrief(tx: WorkspaceTx, args: { briefId: string; agentRunId: string }): Promise<void> {
  await tx`update briefs set status = 'open', completed_at = null
            where workspace_id = ${tx.workspaceId} and id = ${args.briefId} and status = 'done'
              and (claimed_by_run = ${args.agentRunId} or claimed_by_run is null)`;
}

/** Stall detector: a run out of attempts is failed (fencing whoever held it). */
export async function failStalledRun(
  tx: WorkspaceTx,
  args: { agentRunId: string; leaseEpoch: number; reason: string },
): Promise<RunRow | undefined> {
  const [run] = await tx<RunRow[]>`
    update agent_runs set status = 'failed', failure_reason = ${storableText(args.reason, REASON_MAX_CHARS)}, finished_at = now(),
           lease_epoch = lease_epoch + 1, lease_expires_at = null
     where id = ${args.agentRunId} and lease_epoch = ${args.leaseEpoch} and status in ('running', 'queued')
    returning *`;
  if (run) await tx`update briefs set status = 'done', completed_at = now() where id = ${run.brief_id}`;
  return run;
}

export async function appendEvent(
  tx: WorkspaceTx,
  event: { convoyId: string; agentRunId: string | null; type: string; metadata?: Record<string, unknown> },
): Promise<void> {
  await tx`insert into convoy_events (workspace_id, convoy_id, agent_run_id, type, metadata)
           values (${tx.workspaceId}, ${event.convoyId}, ${event.agentRunId}, ${event.type}, ${tx.json(redactValue(event.metadata ?? {}) as never)})`;
}
