// The notes of a run against its rows, commit by commit: which checkpoint commits are still on the
// run's branch, and whether each of those carries the note its row makes (noteOfRow). A branch
// rebased, squashed or reset leaves checkpoint commits off it: those are reported, never noted
// again (a note on a commit no branch holds mirrors nothing). Postgres is the truth, so a repair
// rewrites the missing and wrong notes from the rows, through the one notes writer, and only those
// notes are read and judged again. The notes themselves are read by the caller (readRunNotes),
// once for the audit and the verification. Git runs in the repository (its object store and the
// notes ref), never in the run's worktree.
import type { CheckpointRow } from '../../store/checkpoints.ts';
import { resolveCommit } from '../git/run-git.ts';
import { noteClaims, parseNote, reachableSince, rowClaims } from './note-claims.ts';
import { readRunNotes } from './note-lookup.ts';
import { noteOfRow, writeCheckpointNotes } from './notes.ts';
import type { Finding } from './verify.ts';

export interface NotesAudit {
  branch: string;
  /** The branch's tip; null when the branch is gone. */
  branchTip: string | null;
  /** On the branch, no note under the ref. */
  missing: CheckpointRow[];
  /** On the branch, a note that does not say what its row says. */
  wrong: CheckpointRow[];
  /** No longer on the branch (rebased, squashed or reset away). */
  offBranch: CheckpointRow[];
}

export async function auditNotes(args: {
  repoPath: string;
  branch: string;
  chain: CheckpointRow[];
  /** The text of each note on the chain's commits (readRunNotes). */
  notes: Promise<ReadonlyMap<string, string>>;
}): Promise<NotesAudit> {
  const rows = args.chain.filter((row) => row.commit_oid);
  const audit: NotesAudit = { branch: args.branch, branchTip: null, missing: [], wrong: [], offBranch: [] };
  if (!rows.length) return audit;
  const tip = await resolveCommit(args.repoPath, `refs/heads/${args.branch}`);
  audit.branchTip = tip ?? null;
  const [onBranch, notes] = await Promise.all([
    tip ? reachableSince(args.repoPath, tip, rows) : new Set<string>(),
    args.notes,
  ]);
  audit.offBranch = rows.filter((row) => !onBranch.has(row.commit_oid!));
  return {
    ...audit,
    ...judgeNotes(
      rows.filter((row) => onBranch.has(row.commit_oid!)),
      notes,
    ),
  };
}

/** Which of `rows` have no note and which a note that does not say what the row says. */
function judgeNotes(rows: CheckpointRow[], notes: ReadonlyMap<string, string>): Pick<NotesAudit, 'missing' | 'wrong'> {
  const judged: Pick<NotesAudit, 'missing' | 'wrong'> = { missing: [], wrong: [] };
  for (const row of rows) {
    const text = notes.get(row.commit_oid!);
    if (text === undefined) judged.missing.push(row);
    else {
      const note = parseNote(text);
      if (!note || noteClaims(note) !== rowClaims(row)) judged.wrong.push(row);
    }
  }
  return judged;
}

const seqs = (rows: CheckpointRow[]) => rows.map((r) => r.checkpoint_seq).join(', ');

/** The audit as integrity-check findings (none when every note is right and every commit on the branch). */
export function auditFindings(audit: NotesAudit, notesRef: string): Finding[] {
  const findings: Finding[] = [];
  if (audit.missing.length)
    findings.push({
      kind: 'note_missing',
      detail: `no note under ${notesRef} for checkpoint(s) ${seqs(audit.missing)} (on branch ${audit.branch})`,
    });
  if (audit.wrong.length)
    findings.push({
      kind: 'note_mismatch',
      detail:
        `the note of checkpoint(s) ${seqs(audit.wrong)} does not say what its row says ` +
        '(seq, hash, paths or sha256)',
    });
  if (audit.offBranch.length) {
    const commits = audit.offBranch.map((r) => `${r.checkpoint_seq} at ${r.commit_oid!.slice(0, 12)}`);
    const tip = audit.branchTip ? `tip ${audit.branchTip.slice(0, 12)}` : 'the branch is gone';
    findings.push({
      kind: 'commit_off_branch',
      detail:
        `checkpoint(s) ${commits.join(', ')} no longer on branch ${audit.branch} ` +
        `(${tip}): rebased, squashed or reset`,
    });
  }
  return findings;
}

/** The rows a repair rewrites the notes of: the missing and the wrong, in chain order. */
const toRepair = (audit: NotesAudit) =>
  [...audit.missing, ...audit.wrong].sort((a, b) => a.checkpoint_seq - b.checkpoint_seq);

/** Rewrites the missing and wrong notes from their rows (one notes commit); returns the seqs rewritten. */
export async function repairNotes(repoPath: string, notesRef: string, audit: NotesAudit): Promise<number[]> {
  const rows = toRepair(audit);
  await writeCheckpointNotes(
    repoPath,
    notesRef,
    rows.map((row) => ({ commitOid: row.commit_oid!, note: noteOfRow(row) })),
  );
  return rows.map((r) => r.checkpoint_seq);
}

/**
 * The audit after repairNotes: the notes it rewrote read and judged again, and nothing else (a
 * repair moves no branch and touches no other note, so the rest of the audit stands).
 */
export async function auditRepaired(repoPath: string, notesRef: string, audit: NotesAudit): Promise<NotesAudit> {
  const rows = toRepair(audit);
  const notes = await readRunNotes(
    repoPath,
    notesRef,
    rows.map((row) => row.commit_oid!),
  );
  return { ...audit, ...judgeNotes(rows, notes) };
}
