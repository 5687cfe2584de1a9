// Doc review, the operator's side. A doc-writer run's brief in `doc_review` (worker/run/doc-review.ts)
// is either published (brief `published`, a doc_published event with the files as published), or
// sent back with a note: the note is appended to the run's brief and the same run is retried from
// its last checkpoint (attempt + 1), so the writer reads the note beside what it did so far, and
// ends in review again. Both refuse a run that is not in review (`action_refused`: exit 3, 409) and
// answer a run of another workspace exactly as a missing one (`run_not_found`: exit 2, 404).
import { EchodoError } from '../core/errors.ts';
import { MAX_BRIEF_BYTES, type Job } from '../core/job.ts';
import { setRunLimits } from '../store/budget.ts';
import type { Database } from '../store/connection.ts';
import {
  lockRunBrief,
  publishBrief,
  reopenReviewedBrief,
  reviewFiles,
  setCompletedRunBrief,
  type ReviewFile,
  type RunBrief,
} from '../store/doc-review.ts';
import { appendEvent, lockRunById, redispatchRun, type LockedRun } from '../store/runs.ts';
import { withWorkspace, type WorkspaceTx } from '../store/workspace.ts';
import { actorLabel } from '../worker/run/cancelled.ts';
import { FILES_IN_EVENT } from '../worker/run/doc-review.ts';
import type { JobQueue } from '../worker/queue/types.ts';
import { refuseOverQuota } from '../worker/run/quota.ts';
import type { DispatchResult } from './dispatch.ts';

export const MAX_NOTE_CHARS = 4000;

/** What is wrong with a reviewer's note, or undefined. */
export function noteProblem(note: unknown): string | undefined {
  if (typeof note !== 'string' || !note.trim()) return 'the note must say what to change (it is not empty)';
  if (note.length > MAX_NOTE_CHARS) return `the note is longer than ${MAX_NOTE_CHARS} characters`;
  return undefined;
}

export interface PublishAnswer {
  agentRunId: string;
  briefId: string;
  status: 'published';
  fileCount: number;
  files: ReviewFile[];
}

/** The run and its brief, locked, when the brief is in review with this run; else the reason, thrown. */
async function runInReview(
  tx: WorkspaceTx,
  agentRunId: string,
  verb: string,
): Promise<{ run: LockedRun; brief: RunBrief }> {
  const run = await lockRunById(tx, agentRunId);
  const brief = run && (await lockRunBrief(tx, agentRunId));
  if (!run || !brief)
    throw new EchodoError('run_not_found', `run ${agentRunId} not found in workspace ${tx.workspaceId}`);
  const refuse = (why: string) =>
    new EchodoError(
      'action_refused',
      `run ${agentRunId} is not in review: ${why}; only a brief in doc_review is ${verb}`,
    );
  if (brief.status === 'doc_review' && brief.claimedByRun !== run.id)
    throw refuse(`its brief ${brief.briefId} is in review with run ${brief.claimedByRun}`);
  if (brief.status !== 'doc_review') throw refuse(`its brief ${brief.briefId} is ${brief.status}`);
  if (run.status !== 'completed') throw refuse(`the run is ${run.status}`);
  return { run, brief };
}

/** doc_review → published, with a doc_published event naming the files and their sha256. */
export async function publishRun(
  db: Database,
  args: { workspaceId: string; agentRunId: string; by: string },
): Promise<PublishAnswer> {
  const by = actorLabel(args.by);
  return withWorkspace(db.app, args.workspaceId, async (tx) => {
    const { run, brief } = await runInReview(tx, args.agentRunId, 'published');
    if (!(await publishBrief(tx, { briefId: brief.briefId, agentRunId: run.id, by })))
      throw new Error(`brief ${brief.briefId} changed under its lock`);
    const { files, total } = await reviewFiles(tx, run.id, FILES_IN_EVENT);
    await appendEvent(tx, {
      convoyId: run.convoy_id,
      agentRunId: run.id,
      type: 'doc_published',
      metadata: { briefId: brief.briefId, by, fileCount: total, files },
    });
    return { agentRunId: run.id, briefId: brief.briefId, status: 'published', fileCount: total, files };
  });
}

/** The brief as sent back: the original, then the note (each send-back adds its own). */
export function briefWithNote(brief: string, note: string, attempt: number): string {
  return `${brief}\n\nReviewer's note (sent back from review after attempt ${attempt}): ${note.trim()}`;
}

/**
 * Sends a run in review back: the note appended to its brief, the brief open again, the run
 * re-dispatched from its last checkpoint (attempt + 1, epoch bumped) and enqueued. Budgets, when
 * given, replace the recorded ones (as `retry` does).
 */
export async function sendBackRun(
  db: Database,
  queue: JobQueue,
  args: { workspaceId: string; agentRunId: string; note: string; by: string; maxCostUsd?: number; maxTokens?: number },
): Promise<DispatchResult> {
  const problem = noteProblem(args.note);
  if (problem) throw new EchodoError('invalid_job', `note: ${problem}`);
  const by = actorLabel(args.by);
  const run = await withWorkspace(db.app, args.workspaceId, async (tx) => {
    const { run, brief } = await runInReview(tx, args.agentRunId, 'sent back');
    await refuseOverQuota(tx); // a send-back starts the run again
    const text = briefWithNote(run.job.brief, args.note, run.attempt);
    if (Buffer.byteLength(text) > MAX_BRIEF_BYTES)
      throw new EchodoError(
        'action_refused',
        `run ${run.id}: the brief with the note would be larger than ${MAX_BRIEF_BYTES} bytes; fork or dispatch anew`,
      );
    if (!(await setCompletedRunBrief(tx, { agentRunId: run.id, brief: text })))
      throw new Error(`run ${run.id} changed under its lock`);
    const queued = await redispatchRun(tx, { agentRunId: run.id, leaseEpoch: run.lease_epoch, from: ['completed'] });
    if (!queued || !(await reopenReviewedBrief(tx, { briefId: brief.briefId, agentRunId: run.id })))
      throw new Error(`run ${run.id} changed under its lock`);
    const limits: Partial<Job> = {
      ...(args.maxCostUsd === undefined ? {} : { maxCostUsd: args.maxCostUsd }),
      ...(args.maxTokens === undefined ? {} : { maxTokens: args.maxTokens }),
    };
    const limited = Object.keys(limits).length
      ? await setRunLimits(tx, queued, { ...queued.job, ...limits })
      : undefined;
    await appendEvent(tx, {
      convoyId: run.convoy_id,
      agentRunId: run.id,
      type: 'doc_sent_back',
      metadata: { briefId: brief.briefId, by, note: args.note.trim(), attempt: queued.attempt },
    });
    await appendEvent(tx, {
      convoyId: run.convoy_id,
      agentRunId: run.id,
      type: 'run_redispatched',
      metadata: { attempt: queued.attempt, reason: 'sent_back', from: 'doc_review', entry: 'request' },
    });
    return limited ?? queued;
  });
  // A lost doorbell leaves a queued run: the stall detector re-enqueues it.
  await queue.enqueue(run.job);
  return { jobId: run.job_id, agentRunId: run.id, outcome: 'redispatched' };
}
