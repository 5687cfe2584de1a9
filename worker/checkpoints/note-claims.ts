// Reading a run's notes in bulk and judging them against its rows: what a note claims (reduced
// to what a row vouches for), the notes of a notes commit, many blobs in one git process, and the
// checkpoint commits still reachable from a branch tip. Shared by the local notes audit
// (notes-audit.ts) and the checkpoint remote's verification (worker/remote/verify.ts). Every read
// is of the object store, through runGit; no worktree file is read.
import type { CheckpointRow } from '../../store/checkpoints.ts';
import { runGit } from '../git/run-git.ts';
import { noteOfRow, type CheckpointNote } from './notes.ts';

/** The note's claims, reduced to what a row vouches for (files as a sorted path → sha256 list). */
export function noteClaims(
  n: Pick<CheckpointNote, 'workspaceId' | 'agentRunId' | 'checkpointSeq' | 'hash' | 'files'>,
): string {
  const files = [...(n.files ?? [])].map((f) => `${f.path}\0${f.sha256 ?? ''}`).sort();
  return JSON.stringify([n.workspaceId, n.agentRunId, n.checkpointSeq, n.hash, files]);
}

export function rowClaims(row: CheckpointRow): string {
  return noteClaims(noteOfRow(row));
}

export function parseNote(text: string): CheckpointNote | undefined {
  try {
    return JSON.parse(text) as CheckpointNote;
  } catch {
    return undefined;
  }
}

/**
 * Blob oid of every note in a notes tree, by the annotated object (the fanout's slashes removed).
 * With `missingOk`, a notes commit that does not resolve (a notes ref not made yet) holds none.
 */
export async function notesIn(
  repoPath: string,
  notesCommit: string,
  options: { missingOk?: boolean } = {},
): Promise<Map<string, string>> {
  const r = await runGit(repoPath, ['ls-tree', '-r', notesCommit], options.missingOk ? { allowExitCodes: [128] } : {});
  const notes = new Map<string, string>();
  for (const line of r.stdout.split('\n').filter(Boolean)) {
    const [meta, name] = line.split('\t');
    const [, type, oid] = meta!.split(' ');
    if (type === 'blob') notes.set(name!.replaceAll('/', ''), oid!);
  }
  return notes;
}

/** The contents of many blobs in one `git cat-file --batch`. */
export async function readBlobs(repoPath: string, oids: string[]): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  if (!oids.length) return out;
  const r = await runGit(repoPath, ['cat-file', '--batch'], { input: `${oids.join('\n')}\n` });
  const buf = Buffer.from(r.stdout, 'utf8');
  let at = 0;
  for (const oid of oids) {
    const eol = buf.indexOf(0x0a, at);
    const header = buf.subarray(at, eol).toString('utf8').split(' ');
    if (header[1] === 'missing') {
      at = eol + 1;
      continue;
    }
    const size = Number(header[2]);
    out.set(oid, buf.subarray(eol + 1, eol + 1 + size).toString('utf8'));
    at = eol + 1 + size + 1;
  }
  return out;
}

/**
 * The commits reachable from `tip` down to the oldest row's commit (present locally): a row's commit
 * is on the branch iff it is in this set. Bounded by the run's own history, not the repo's.
 */
export async function reachableSince(repoPath: string, tip: string, rows: CheckpointRow[]): Promise<Set<string>> {
  const oids = rows.map((r) => r.commit_oid!);
  const check = await runGit(repoPath, ['cat-file', '--batch-check=%(objectname) %(objecttype)'], {
    input: `${oids.join('\n')}\n`,
  });
  const present = new Set(
    check.stdout
      .split('\n')
      .filter((l) => l.endsWith(' commit'))
      .map((l) => l.split(' ')[0]!),
  );
  const oldest = oids.find((oid) => present.has(oid));
  if (!oldest) return new Set();
  const r = await runGit(repoPath, ['rev-list', tip, '--not', `${oldest}^@`]);
  return new Set(r.stdout.split('\n').filter(Boolean));
}
