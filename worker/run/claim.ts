// A queue message, from taken to claimed (or answered): every message ends served, refused and
// acknowledged, dead-lettered with a reason, or handed back for a retry after a transient error.
// The decision is worker/run/admission.ts's, the same as dispatch's; here the taker claims the run
// in the same transaction, so no second worker can slip in between. A workspace over its storage
// quota starts nothing from a queue either (quota.ts): a new or never-held run is failed with the
// reason and its message dead-lettered; a re-dispatch is rolled back and its message dead-lettered.
import type { Database } from '../../store/connection.ts';
import { isTransientDbError } from '../../store/transient-retry.ts';
import { appendEvent, claimRun, failQueuedRun, workspaceExists, type RunRow } from '../../store/runs.ts';
import { inWorkspace } from '../../store/workspace.ts';
import type { Config } from '../../core/config.ts';
import { errorMessage } from '../../core/errors.ts';
import { faultPoint } from '../faults.ts';
import type { Job } from '../../core/job.ts';
import type { Logger } from '../log.ts';
import type { Delivery } from '../queue/types.ts';
import { admitJob, admitRacing, type Admission } from './admission.ts';
import { quotaRefusal, startsRun } from './quota.ts';

/** A re-dispatch refused by the quota: thrown to roll its transaction back. */
class QuotaRefused extends Error {}

export type Admitted =
  | { kind: 'claimed'; run: RunRow; outcome: 'recorded' | 'served' | 'redispatched' }
  | { kind: 'dead'; reason: string }
  | { kind: 'skipped' };

/**
 * Admits and claims the run of a delivered job. A transient database error (after the store's
 * retries) hands the message back and is rethrown; any other error dead-letters it, so a job
 * Postgres cannot take is never redelivered forever.
 */
export async function admitDelivery(
  deps: { config: Config; db: Database; workerId: string; log: Logger },
  delivery: Delivery,
  job: Job,
  agentRunIdGiven: boolean,
): Promise<Admitted> {
  const { config, db, log } = deps;
  const scoped = inWorkspace(db.app, job.workspaceId, log);
  const admitAndClaim = () =>
    scoped(async (tx) => {
      const admission: Admission = await admitJob(tx, job, {
        entry: 'delivery',
        agentRunIdGiven,
        defaultRepoPath: config.WORKER_REPO_ROOT,
      });
      if (admission.outcome === 'refused') return { admission, run: undefined };
      const overQuota = startsRun(admission) ? await quotaRefusal(tx) : undefined;
      if (overQuota && admission.outcome === 'redispatched') throw new QuotaRefused(overQuota);
      if (overQuota) {
        // A run that never started: failed with the reason, so it neither waits nor comes back.
        await failQueuedRun(tx, { agentRunId: admission.run.id, reason: overQuota });
        await appendEvent(tx, {
          convoyId: admission.run.convoy_id,
          agentRunId: admission.run.id,
          type: 'run_failed',
          metadata: { reason: overQuota, code: 'action_refused', attempt: admission.run.attempt },
        });
        return { admission, run: undefined, overQuota };
      }
      const run = await claimRun(tx, {
        agentRunId: admission.run.id,
        workerId: deps.workerId,
        leaseMs: config.WORKER_LEASE_MS,
      });
      return { admission, run, overQuota: undefined };
    });

  let admitted: Awaited<ReturnType<typeof admitAndClaim>>;
  try {
    if (!(await scoped(workspaceExists)))
      return { kind: 'dead', reason: `workspace "${job.workspaceId}" does not exist` };
    admitted = await admitRacing(admitAndClaim);
  } catch (err) {
    if (err instanceof QuotaRefused) return { kind: 'dead', reason: err.message };
    if (isTransientDbError(err)) {
      await delivery.release?.().catch(() => {}); // if Redis is down too, orphan recovery returns it
      throw err;
    }
    log.error({ jobId: job.jobId, agentRunId: job.agentRunId, error: errorMessage(err) }, 'job could not be recorded');
    return { kind: 'dead', reason: `could not record the job: ${errorMessage(err)}` };
  }
  const { admission, run } = admitted;
  if (run) faultPoint('after-claim');
  if (admitted.overQuota) return { kind: 'dead', reason: admitted.overQuota };

  if (admission.outcome === 'refused') {
    if (admission.why === 'mismatch' || admission.why === 'job_conflict')
      return { kind: 'dead', reason: admission.message };
    await delivery.ack();
    log.info({ agentRunId: admission.run?.id, jobId: job.jobId, why: admission.why }, admission.message);
    return { kind: 'skipped' };
  }
  await delivery.ack();
  if (!run) {
    // Not queued any more by the time of the claim (the row was locked, so this is a bug guard).
    log.info(
      { agentRunId: admission.run.id, jobId: job.jobId },
      'run is not queued (held by another worker or finished); job dropped',
    );
    return { kind: 'skipped' };
  }
  if (admission.outcome === 'redispatched') {
    log.info(
      { agentRunId: run.id, attempt: run.attempt, from: admission.state },
      're-dispatched on request: resuming from the last checkpoint',
    );
  }
  return { kind: 'claimed', run, outcome: admission.outcome };
}
