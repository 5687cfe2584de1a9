// A doc-writer run ends in review: it writes straight into the repository, with no branch or
// commit to look at, so its brief goes to `doc_review` with the files it wrote and their sha256
// (its manifest), recorded in a doc_review event, until an operator publishes it or sends it
// back (operator/publish.ts).
import { markBriefInReview, reviewFiles } from '../../store/doc-review.ts';
import { appendEvent, type RunRow } from '../../store/runs.ts';
import type { WorkspaceTx } from '../../store/workspace.ts';
import type { Harness } from './harnesses.ts';

/** Files listed in an event; the manifest itself holds them all. */
export const FILES_IN_EVENT = 200;

export function endsInReview(harness: Pick<Harness, 'alias'>): boolean {
  return harness.alias === 'doc-writer';
}

/** In the completion's transaction, after completeRun: the brief in review, the files on record. */
export async function enterDocReview(tx: WorkspaceTx, run: Pick<RunRow, 'id' | 'brief_id' | 'convoy_id'>) {
  if (!(await markBriefInReview(tx, { briefId: run.brief_id, agentRunId: run.id }))) return;
  const { files, total } = await reviewFiles(tx, run.id, FILES_IN_EVENT);
  await appendEvent(tx, {
    convoyId: run.convoy_id,
    agentRunId: run.id,
    type: 'doc_review',
    metadata: { briefId: run.brief_id, fileCount: total, files },
  });
}
