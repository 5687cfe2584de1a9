// Doc review: a doc-writer run's brief ends `doc_review` (completeRun), and an operator answers
// with a publish or a send-back. One query per function; each change is a compare-and-set on the
// brief's status and on the run that put it in review, so two operators cannot both act on it.
import { storableText } from '../core/redact.ts';
import type { WorkspaceTx } from './workspace.ts';

export type BriefStatus = 'open' | 'claimed' | 'done' | 'doc_review' | 'published';

/** One file the run wrote, from its manifest; sha256 null: the run deleted it. */
export interface ReviewFile {
  path: string;
  sha256: string | null;
}

export interface RunBrief {
  briefId: string;
  status: BriefStatus;
  /** The run whose work the brief holds (the last to claim it). */
  claimedByRun: string | null;
  publishedAt: Date | null;
  publishedBy: string | null;
}

const RUN_BRIEF_SQL = `
select b.id as brief_id, b.status, b.claimed_by_run, b.published_at, b.published_by
  from agent_runs r
  join briefs b on b.workspace_id = r.workspace_id and b.id = r.brief_id
 where r.workspace_id = $1 and r.id = $2`;

function toRunBrief(row: Record<string, any> | undefined): RunBrief | undefined {
  if (!row) return undefined;
  return {
    briefId: row.brief_id,
    status: row.status,
    claimedByRun: row.claimed_by_run,
    publishedAt: row.published_at,
    publishedBy: row.published_by,
  };
}

/** The brief of a run; undefined when the run is not in this workspace. */
export async function runBrief(tx: WorkspaceTx, agentRunId: string): Promise<RunBrief | undefined> {
  const [row] = await tx.unsafe(RUN_BRIEF_SQL, [tx.workspaceId, agentRunId]);
  return toRunBrief(row);
}

/** The same, the brief row locked: what a publish or send-back decides on. */
export async function lockRunBrief(tx: WorkspaceTx, agentRunId: string): Promise<RunBrief | undefined> {
  const [row] = await tx.unsafe(`${RUN_BRIEF_SQL} for update of b`, [tx.workspaceId, agentRunId]);
  return toRunBrief(row);
}

/** The files the run wrote (its manifest), by path, at most `limit`, with how many there are in all. */
export async function reviewFiles(
  tx: WorkspaceTx,
  agentRunId: string,
  limit: number,
): Promise<{ files: ReviewFile[]; total: number }> {
  const rows = await tx<(ReviewFile & { total: number })[]>`
    select path, encode(sha256, 'hex') as sha256, count(*) over ()::int as total from checkpoint_manifest
     where workspace_id = ${tx.workspaceId} and agent_run_id = ${agentRunId}
     order by path collate "C"
     limit ${limit}`;
  return { files: rows.map(({ path, sha256 }) => ({ path, sha256 })), total: rows[0]?.total ?? 0 };
}

/** doc_review → published, only for the run that put the brief in review. */
export async function publishBrief(
  tx: WorkspaceTx,
  args: { briefId: string; agentRunId: string; by: string },
): Promise<boolean> {
  const rows = await tx`
    update briefs set status = 'published', published_at = now(), published_by = ${storableText(args.by, 200)}
     where workspace_id = ${tx.workspaceId} and id = ${args.briefId} and status = 'doc_review'
       and claimed_by_run = ${args.agentRunId}
    returning 1`;
  return rows.length > 0;
}

/** doc_review → open: the brief is worked on again by the same run (sent back). */
export async function reopenReviewedBrief(
  tx: WorkspaceTx,
  args: { briefId: string; agentRunId: string },
): Promise<boolean> {
  const rows = await tx`
    update briefs set status = 'open', completed_at = null
     where workspace_id = ${tx.workspaceId} and id = ${args.briefId} and status = 'doc_review'
       and claimed_by_run = ${args.agentRunId}
    returning 1`;
  return rows.length > 0;
}

/** A completed run's brief text replaced (the reviewer's note appended), redacted as every stored brief is. */
export async function setCompletedRunBrief(
  tx: WorkspaceTx,
  args: { agentRunId: string; brief: string },
): Promise<boolean> {
  const rows = await tx`
    update agent_runs set job = jsonb_set(job, '{brief}', to_jsonb(${storableText(args.brief)}::text))
     where workspace_id = ${tx.workspaceId} and id = ${args.agentRunId} and status = 'completed'
    returning 1`;
  return rows.length > 0;
}

/**
 * Completion of a doc-writer run: its brief (just marked done) goes to review, held by this run.
 * False when the brief was published already (by another run of the same brief): it stays so.
 */
export async function markBriefInReview(
  tx: WorkspaceTx,
  args: { briefId: string; agentRunId: string },
): Promise<boolean> {
  const rows = await tx`
    update briefs set status = 'doc_review', completed_at = now(), claimed_by_run = ${args.agentRunId}
     where workspace_id = ${tx.workspaceId} and id = ${args.briefId} and status <> 'published'
    returning 1`;
  return rows.length > 0;
}

/** What a run page shows of a doc-writer run's review: its brief and the files it wrote. */
export async function docReview(
  tx: WorkspaceTx,
  agentRunId: string,
  limit: number,
): Promise<{ brief: RunBrief; files: ReviewFile[]; total: number } | undefined> {
  const brief = await runBrief(tx, agentRunId);
  return brief && { brief, ...(await reviewFiles(tx, agentRunId, limit)) };
}
