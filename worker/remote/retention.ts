// Retention on the checkpoint remote (docs/checkpoints.md "Retention on the remote"): what
// `npm run prune` and the storage sweep do to a pruned run's refs on WORKER_CHECKPOINT_REMOTE. The
// run's notes ref is replaced by a fresh, parentless notes commit holding only the notes of the
// checkpoints retention keeps (their rows stay, so their notes must stay): the pruned checkpoints' notes, their notes commits
// and blobs, become unreachable and the remote's own `git gc` deletes them. With branch removal
// asked for, the branch and the notes ref are deleted instead. One `git push` per run.
import { EchodoError } from '../../core/errors.ts';
import { redactString } from '../../core/redact.ts';
import type { CheckpointRow } from '../../store/checkpoints.ts';
import { gitErrorDetail, runGit } from '../git/run-git.ts';
import { noteOfRow } from '../checkpoints/notes.ts';
import { lsRemote, push } from './push.ts';

/** A pruned run's refs could not be updated on the remote: its rows stay, the next prune retries. */
export class RemoteRetentionError extends EchodoError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('transient', redactString(message), options);
    this.name = 'RemoteRetentionError';
  }
}

/** Which of these refs the remote has (one `git ls-remote`): name → oid. */
export async function remoteRefs(cwd: string, remote: string, names: string[]): Promise<Map<string, string>> {
  return lsRemote(cwd, remote, names).catch((err: unknown) => {
    throw new RemoteRetentionError(`could not reach the checkpoint remote: ${gitErrorDetail(err)}`, { cause: err });
  });
}

/**
 * A notes commit with no parent holding the kept checkpoints' notes, from their rows (Postgres is
 * the truth; the same JSON the writer mirrors). Written into the local object store only; no ref.
 */
async function keptNotesCommit(repoPath: string, rows: CheckpointRow[]): Promise<string> {
  // One note per commit: a later row on the same commit is the note the writer left there.
  const byCommit = new Map(rows.filter((r) => r.commit_oid).map((r) => [r.commit_oid!, r]));
  const entries: string[] = [];
  for (const [commit, row] of byCommit) {
    const body = redactString(JSON.stringify(noteOfRow(row)));
    const blob = (await runGit(repoPath, ['hash-object', '-w', '--stdin'], { input: body })).stdout.trim();
    entries.push(`100644 blob ${blob}\t${commit}\n`);
  }
  const tree = (await runGit(repoPath, ['mktree'], { input: entries.join('') })).stdout.trim();
  const seqs = rows.map((r) => r.checkpoint_seq).join(', ');
  const message = `echodo: notes of checkpoint(s) ${seqs} kept by retention; earlier checkpoints' notes dropped`;
  return (await runGit(repoPath, ['commit-tree', tree, '-m', message])).stdout.trim();
}

export interface RemotePrunePlan {
  repoPath: string;
  remote: string;
  notesRef: string;
  branch: string;
  /** The checkpoints retention keeps: their notes are the only ones left on the remote. */
  kept: CheckpointRow[];
  /** Rewrite the notes ref (rows of the run are being pruned and the ref is on the remote). */
  rewriteNotes: boolean;
  /** Delete the branch and the notes ref (the operator asked for branch removal). */
  deleteBranch: boolean;
  /** What the remote has now (remoteRefs). */
  present: Map<string, string>;
}

export interface RemotePruneResult {
  /** Refs changed on the remote, as `<ref> -> <oid|deleted>`. */
  updated: string[];
  /** The kept-notes commit the run's notes ref now points at (also set locally by the caller). */
  notesCommit?: string;
}

/** One push; throws RemoteRetentionError when the remote is not reached or refuses a ref. */
export async function pruneRemoteRefs(plan: RemotePrunePlan): Promise<RemotePruneResult> {
  const branchRef = `refs/heads/${plan.branch}`;
  const specs: string[] = [];
  const updated: string[] = [];
  let notesCommit: string | undefined;
  if (plan.deleteBranch) {
    for (const ref of [branchRef, plan.notesRef]) {
      if (plan.present.has(ref)) {
        specs.push(`:${ref}`);
        updated.push(`${ref} -> deleted`);
      }
    }
  } else if (plan.rewriteNotes && plan.present.has(plan.notesRef) && plan.kept.some((r) => r.commit_oid)) {
    notesCommit = await keptNotesCommit(plan.repoPath, plan.kept);
    // Forced: the new notes commit shares no history with the old one (that is what frees the space).
    // Safe: the run is finished, so no lease holder writes this ref any more.
    specs.push(`+${notesCommit}:${plan.notesRef}`);
    updated.push(`${plan.notesRef} -> ${notesCommit}`);
  }
  if (!specs.length) return { updated };
  const refs = await push(plan.repoPath, plan.remote, specs).catch((err: unknown) => {
    throw new RemoteRetentionError((err as Error).message, { cause: err });
  });
  const refused = refs.filter((r) => r.flag === '!');
  if (refused.length || refs.length < specs.length) {
    throw new RemoteRetentionError(
      `the checkpoint remote refused ${refused.map((r) => `${r.to} (${r.summary})`).join(', ') || 'the update'}`,
    );
  }
  return { updated, notesCommit };
}
