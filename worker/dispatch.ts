// Dispatch: record the run in Postgres first (status 'queued'), then ring the queue's doorbell.
// A job is never lost once dispatch returns: the row exists even if the enqueue is lost, and
// the stall detector re-enqueues runs queued for too long.
import { randomUUID } from 'node:crypto';
import type { Database } from '../store/connection.ts';
import { recordRun, workspaceExists } from '../store/runs.ts';
import { withWorkspace } from '../store/workspace.ts';
import { redactString } from './checkpoints/redact.ts';
import { EchodoError } from './errors.ts';
import { parseJob, type Job } from './job.ts';
import type { JobQueue } from './queue/types.ts';

export async function dispatchJob(db: Database, queue: JobQueue, input: unknown): Promise<{ jobId: string; agentRunId: string }> {
  // Each dispatch is a new job unless the caller names one.
  const withId = input && typeof input === 'object' && !('jobId' in input) ? { ...input, jobId: randomUUID() } : input;
  const parsed = parseJob(withId);
  if (!parsed.ok) throw new EchodoError('invalid_job', parsed.problems.join('\n'));
  // The brief is stored (and shown to the model) with secrets redacted.
  const job: Job = { ...parsed.job, brief: redactString(parsed.job.brief) };
  const { agentRunId } = await withWorkspace(db.app, job.workspaceId, async (tx) => {
    if (!(await workspaceExists(tx))) throw new EchodoError('workspace_not_found', `workspaceId: workspace "${job.workspaceId}" does not exist (create it with: npm run workspace -- create ${job.workspaceId})`);
    return recordRun(tx, job);
  });
  await queue.enqueue({ ...job, agentRunId });
  return { jobId: job.jobId, agentRunId };
}
