// Dispatch: record the run in Postgres first (status 'queued'), then ring the queue's doorbell.
// A job is never lost once dispatch returns: the row exists even if the enqueue is lost, and
// the stall detector re-enqueues runs queued for too long. A job naming an existing run is a
// re-dispatch, decided by worker/run/admission.ts (the same decision the queue consumers make).
import { randomUUID } from 'node:crypto';
import type { Database } from '../store/connection.ts';
import { getRun, workspaceExists } from '../store/runs.ts';
import { withWorkspace, type WorkspaceTx } from '../store/workspace.ts';
import { redactString } from '../core/redact.ts';
import { EchodoError } from '../core/errors.ts';
import { faultPoint } from '../worker/faults.ts';
import { parseJob, type Job } from '../core/job.ts';
import type { JobQueue } from '../worker/queue/types.ts';
import { admitJob, admitRacing, type Admission } from '../worker/run/admission.ts';
import { assertRepoGranted, repoNeedingGrant } from '../worker/run/repo-access.ts';
import { refuseOverQuota, startsRun } from '../worker/run/quota.ts';

export interface DispatchResult {
  jobId: string;
  agentRunId: string;
  /** recorded: a new run; served: it was queued already; redispatched: attempt + 1, resumes. */
  outcome: 'recorded' | 'served' | 'redispatched';
}

/** One admission transaction in the workspace (decided again after a race: worker/run/admission.ts). */
function admitInWorkspace<T>(db: Database, workspaceId: string, fn: (tx: WorkspaceTx) => Promise<T>): Promise<T> {
  return admitRacing(() => withWorkspace(db.app, workspaceId, fn));
}

/** A refused admission as an error: `action_refused` (dispatch exits 3), its message one line. */
function refusal(admission: Admission): never {
  if (admission.outcome !== 'refused') throw new Error('not a refusal');
  throw new EchodoError('action_refused', admission.message);
}

/**
 * Validates, admits and enqueues a job. Throws `invalid_job` / `workspace_not_found` (exit 2)
 * and `action_refused` for a refused re-dispatch (exit 3). `defaultRepoPath` (WORKER_REPO_ROOT)
 * lets a job that leaves repoPath out match a run recorded with it spelled out.
 */
export async function dispatchJob(
  db: Database,
  queue: JobQueue,
  input: unknown,
  options: { defaultRepoPath?: string } = {},
): Promise<DispatchResult> {
  // Each dispatch is a new job unless the caller names one.
  const withId = input && typeof input === 'object' && !('jobId' in input) ? { ...input, jobId: randomUUID() } : input;
  const parsed = parseJob(withId);
  if (!parsed.ok) throw new EchodoError('invalid_job', parsed.problems.join('\n'));
  // The brief is stored (and shown to the model) with secrets redacted.
  const job: Job = { ...parsed.job, brief: redactString(parsed.job.brief) };
  // Told WORKER_REPO_ROOT, dispatch refuses a repository the workspace was not granted; the
  // claim checks every run again (worker/run/repo-access.ts), whatever way it was enqueued.
  const root = options.defaultRepoPath;
  const repoReal = root === undefined ? null : await repoNeedingGrant(job.repoPath, root);
  const admission = await admitInWorkspace(db, job.workspaceId, async (tx) => {
    if (!(await workspaceExists(tx)))
      throw new EchodoError(
        'workspace_not_found',
        `workspaceId: workspace "${job.workspaceId}" does not exist (create it with: npm run workspace -- create ${job.workspaceId})`,
      );
    if (repoReal !== null) await assertRepoGranted(tx, job.repoPath!, repoReal);
    const admitted = await admitJob(tx, job, {
      entry: 'request',
      agentRunIdGiven: parsed.agentRunIdGiven,
      defaultRepoPath: options.defaultRepoPath,
    });
    // Over the quota, nothing starts: the new run or the re-dispatch is rolled back with the refusal.
    if (startsRun(admitted)) await refuseOverQuota(tx);
    return admitted;
  });
  return ring(queue, admission);
}

/**
 * The operator's Retry (and any caller holding just a run id): the run's recorded job, named by
 * its id, through the same decision as dispatch. `run_not_found` for an id this workspace does
 * not have; `action_refused` when the matrix refuses (completed, cancelled, running).
 */
export async function retryRun(
  db: Database,
  queue: JobQueue,
  args: { workspaceId: string; agentRunId: string; maxCostUsd?: number; maxTokens?: number },
): Promise<DispatchResult> {
  const admission = await admitInWorkspace(db, args.workspaceId, async (tx) => {
    const run = await getRun(tx, args.agentRunId);
    if (!run || run.workspace_id !== args.workspaceId)
      throw new EchodoError('run_not_found', `run ${args.agentRunId} not found`);
    // New budgets, when given, replace the recorded ones (admission writes them).
    const limits = {
      ...(args.maxCostUsd === undefined ? {} : { maxCostUsd: args.maxCostUsd }),
      ...(args.maxTokens === undefined ? {} : { maxTokens: args.maxTokens }),
    };
    const job: Job = { ...run.job, ...limits, agentRunId: run.id, resumeFromCheckpoint: true };
    const admitted = await admitJob(tx, job, { entry: 'request', agentRunIdGiven: true });
    if (startsRun(admitted)) await refuseOverQuota(tx);
    return admitted;
  });
  return ring(queue, admission);
}

async function ring(queue: JobQueue, admission: Admission): Promise<DispatchResult> {
  if (admission.outcome === 'refused') refusal(admission);
  // A crash here leaves a queued run without a doorbell: the stall detector re-enqueues it.
  faultPoint('after-admission');
  await queue.enqueue(admission.run.job);
  return { jobId: admission.run.job_id, agentRunId: admission.run.id, outcome: admission.outcome };
}
