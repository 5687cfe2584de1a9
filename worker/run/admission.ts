// Admission of a job, and re-dispatch: the one place that decides what a job naming an existing
// run does. Used by dispatch (CLI and dispatchJob), by both queues' consumers (executeDelivery)
// and by the operator's Retry (retryRun in operator/dispatch.ts). The matrix:
//   queued                               → served once (nothing new)
//   running, lease live                  → refused: a duplicate delivery
//   running, lease expired; failed;      → re-dispatched as the stall detector does it (attempt + 1,
//   released (queued after a holder)       epoch bumped, run_redispatched {reason: 'requested'}),
//                                          then resumed from its last checkpoint, verified
//   completed, cancelled                 → refused
// A run of another workspace is never seen here (every lookup is scoped): it is an unknown id.
import path from 'node:path';
import {
  appendEvent,
  lockRunById,
  lockRunByJobId,
  recordRun,
  redispatchRun,
  reopenBrief,
  type LockedRun,
  type RunRow,
  type RunStatus,
} from '../../store/runs.ts';
import type { WorkspaceTx } from '../../store/workspace.ts';
import { redactString } from '../../core/redact.ts';
import type { Job } from '../../core/job.ts';
import { setRunLimits } from '../../store/budget.ts';

/** Where the job came from: a request (dispatch, Retry) rings the doorbell itself afterwards;
 *  a delivery (taken from a queue) is claimed by the taker in the same transaction. */
export type AdmissionEntry = 'request' | 'delivery';

export type RunState =
  | 'queued'
  | 'released'
  | 'running_live'
  | 'running_expired'
  | 'failed'
  | 'completed'
  | 'cancelled'
  | 'budget_exhausted';

export type Verdict = 'serve' | 'redispatch' | 'refuse_duplicate' | 'refuse_finished';

export type Admission =
  | { outcome: 'recorded'; run: RunRow }
  | { outcome: 'served'; run: RunRow; state: RunState }
  | { outcome: 'redispatched'; run: RunRow; state: RunState }
  | { outcome: 'refused'; why: 'duplicate' | 'finished' | 'mismatch' | 'job_conflict'; message: string; run?: RunRow };

/** Released: queued again after a worker held it (SIGTERM, an outage, or a re-dispatch). */
export function runState(run: Pick<LockedRun, 'status' | 'lease_epoch' | 'lease_live'>): RunState {
  switch (run.status) {
    case 'queued':
      return run.lease_epoch > 0 ? 'released' : 'queued';
    case 'running':
      return run.lease_live ? 'running_live' : 'running_expired';
    default:
      return run.status;
  }
}

/**
 * The matrix. `ownDoorbell`: a queue message that is exactly the run's recorded job (what
 * dispatch, a release and the stall detector enqueue). It only rings for a run already queued,
 * so for a released run it serves it without counting a new attempt; any other message naming
 * a released run is a re-dispatch request.
 */
export function decide(state: RunState, ctx: { entry: AdmissionEntry; ownDoorbell: boolean }): Verdict {
  switch (state) {
    case 'queued':
      return 'serve';
    case 'released':
      return ctx.entry === 'delivery' && ctx.ownDoorbell ? 'serve' : 'redispatch';
    case 'running_live':
      return 'refuse_duplicate';
    case 'running_expired':
    case 'failed':
    case 'budget_exhausted':
      return 'redispatch';
    case 'completed':
    case 'cancelled':
      return 'refuse_finished';
  }
}

/** The first field in which the job differs from the recorded run, or null. Workspace: by scope. */
export function mismatchedField(job: Job, recorded: Job, defaultRepoPath?: string): string | null {
  const repo = (j: Job) => {
    const p = j.repoPath ?? defaultRepoPath;
    return p === undefined ? null : path.resolve(p);
  };
  if (job.convoyId !== recorded.convoyId) return 'convoyId';
  if (job.briefId !== recorded.briefId) return 'briefId';
  if (redactString(job.brief) !== redactString(recorded.brief)) return 'brief';
  if (repo(job) !== repo(recorded)) return 'repoPath';
  if (job.baseRef !== recorded.baseRef) return 'baseRef';
  return null;
}

/** Is this message the run's own job, as recorded (key order and redaction aside)? */
export function isOwnDoorbell(job: Job, recorded: Job): boolean {
  const canonical = (j: Job) => {
    const entries = Object.entries({ ...j, brief: redactString(j.brief) }).filter(([, v]) => v !== undefined);
    return JSON.stringify(entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  };
  return canonical(job) === canonical(recorded);
}

const FROM: Record<RunState, RunStatus[]> = {
  queued: ['queued'],
  released: ['queued'],
  running_live: ['running'],
  running_expired: ['running'],
  failed: ['failed'],
  completed: ['completed'],
  cancelled: ['cancelled'],
  budget_exhausted: ['budget_exhausted'],
};

/**
 * Admits a job in one workspace transaction: records a new run, or applies the matrix to the
 * run it names (by agentRunId when the job named one, else by jobId: a redelivery). Refusals are
 * answers, not throws. The caller enqueues (request) or claims (delivery) the returned run.
 */
export async function admitJob(
  tx: WorkspaceTx,
  job: Job,
  opts: { entry: AdmissionEntry; agentRunIdGiven: boolean; defaultRepoPath?: string },
): Promise<Admission> {
  let existing = opts.agentRunIdGiven ? await lockRunById(tx, job.agentRunId) : undefined;
  if (!existing) {
    const byJob = await lockRunByJobId(tx, job.jobId);
    if (byJob && opts.agentRunIdGiven) {
      return {
        outcome: 'refused',
        why: 'job_conflict',
        run: byJob,
        message: `jobId ${job.jobId} was recorded as run ${byJob.id}, not as agentRunId ${job.agentRunId}: refused`,
      };
    }
    existing = byJob;
  }
  if (!existing) {
    const { agentRunId } = await recordRun(tx, job);
    const run = await lockRunById(tx, agentRunId);
    if (!run) throw new Error(`run ${agentRunId} was recorded but cannot be read back`);
    return { outcome: 'recorded', run };
  }

  const field = mismatchedField(job, existing.job, opts.defaultRepoPath);
  if (field) {
    return {
      outcome: 'refused',
      why: 'mismatch',
      run: existing,
      message: `run ${existing.id} was recorded with a different ${field}: a re-dispatch must match it (refused)`,
    };
  }
  const state = runState(existing);
  const verdict = decide(state, { entry: opts.entry, ownDoorbell: isOwnDoorbell(job, existing.job) });
  switch (verdict) {
    case 'serve':
      return { outcome: 'served', run: existing, state };
    case 'refuse_duplicate':
      return {
        outcome: 'refused',
        why: 'duplicate',
        run: existing,
        message: `run ${existing.id} is running on ${existing.worker_id ?? 'a worker'} with a live lease (attempt ${existing.attempt}): duplicate delivery refused`,
      };
    case 'refuse_finished':
      return {
        outcome: 'refused',
        why: 'finished',
        run: existing,
        message: `run ${existing.id} is ${existing.status}: it is not re-dispatched (fork it to go on from a checkpoint)`,
      };
    case 'redispatch': {
      // The row is locked: the compare-and-set cannot miss.
      const run = await redispatchRun(tx, {
        agentRunId: existing.id,
        leaseEpoch: existing.lease_epoch,
        from: FROM[state],
      });
      if (!run) throw new Error(`run ${existing.id} changed under its lock`);
      if (state === 'failed') await reopenBrief(tx, { briefId: run.brief_id, agentRunId: run.id });
      // A retry may carry new budgets: they replace the recorded ones (the other fields must match).
      const limits = await setRunLimits(tx, run, job);
      await appendEvent(tx, {
        convoyId: run.convoy_id,
        agentRunId: run.id,
        type: 'run_redispatched',
        metadata: {
          attempt: run.attempt,
          reason: 'requested',
          from: state,
          entry: opts.entry,
          previousFailure: existing.failure_reason ?? undefined,
        },
      });
      return { outcome: 'redispatched', run: limits ?? run, state };
    }
  }
}

const UNIQUE_VIOLATION = '23505';

/**
 * One admission transaction, decided again once when another entry recorded the same new run
 * meanwhile (a unique violation): the second decision sees the run and serves or re-dispatches it.
 */
export async function admitRacing<T>(admit: () => Promise<T>): Promise<T> {
  try {
    return await admit();
  } catch (err) {
    if ((err as { code?: string }).code !== UNIQUE_VIOLATION) throw err;
    return admit();
  }
}
