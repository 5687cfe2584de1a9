// Step 3 of a checkpoint: mirror the row as a git note on the checkpoint commit.
// Notes refs are shared by every worktree of a repo, and concurrent `git notes add` silently
// loses notes, so every write goes through one writer per repository: an in-process queue, a
// cross-process lock file in the common git dir, and a compare-and-set ref update (fast-import
// refuses a non-fast-forward update, so a writer that raced anyway retries instead of losing).
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { GitError, runGit } from '../git.ts';
import { redactString } from '../../core/redact.ts';
import { withFileLock } from '../../core/file-lock.ts';

export interface CheckpointNote {
  workspaceId: string;
  agentRunId: string;
  checkpointSeq: number;
  step: number;
  hash: string;
  prevHash: string | null;
  branch: string | null;
  files: { path: string; sha256: string | null }[];
}

const queues = new Map<string, Promise<unknown>>();
// A note write holds the lock for milliseconds, refreshing it as it works (core/file-lock.ts). A holder
// that is dead or paused (SIGSTOP, a frozen VM) for longer than this is taken over, and the
// compare-and-set ref update keeps a late writer from losing anyone's note.
const STALE_LOCK_MS = 2_000;

// Per-process caches that save a git spawn per note: a worktree's common dir never changes,
// and a notes ref, once it exists, is assumed to (a wrong guess costs one retry, not a note).
const commonDirs = new Map<string, string>();
const knownRefs = new Set<string>();

export async function commonDirOf(cwd: string): Promise<string> {
  let dir = commonDirs.get(cwd);
  if (!dir) {
    dir = path.resolve(cwd, (await runGit(cwd, ['rev-parse', '--git-common-dir'])).stdout.trim());
    commonDirs.set(cwd, dir);
  }
  return dir;
}

export interface NoteWrite {
  commitOid: string;
  note: CheckpointNote;
}

/** One notes commit holding every note of the batch (fast-import picks the fanout). */
function fastImportScript(notesRef: string, notes: NoteWrite[], hasParent: boolean): string {
  const message = `echodo checkpoint note${notes.length > 1 ? 's' : ''}\n`;
  const lines = [
    `commit ${notesRef}`,
    `committer echodo-worker <echodo-worker@localhost> ${Math.floor(Date.now() / 1000)} +0000`,
    `data ${Buffer.byteLength(message)}`,
    message,
  ];
  if (hasParent) lines.push(`from ${notesRef}^0`);
  for (const { commitOid, note } of notes) {
    const body = redactString(JSON.stringify(note)); // paths and ids only, and still through the one redactor
    lines.push(`N inline ${commitOid}`, `data ${Buffer.byteLength(body)}`, body);
  }
  lines.push('');
  return lines.join('\n');
}

async function writeNotesOnce(cwd: string, key: string, notesRef: string, notes: NoteWrite[], trustCache: boolean): Promise<void> {
  let hasParent = trustCache && knownRefs.has(key);
  if (!hasParent) hasParent = (await runGit(cwd, ['rev-parse', '--verify', '--quiet', notesRef], { allowExitCodes: [1] })).exitCode === 0;
  await runGit(cwd, ['-c', 'fastimport.unpackLimit=1', 'fast-import', '--quiet'], { input: fastImportScript(notesRef, notes, hasParent) });
  knownRefs.add(key);
}

/** Writes (or overwrites) notes in one notes commit. Serialized per repository; retries a lost race. */
export async function writeCheckpointNotes(cwd: string, notesRef: string, notes: NoteWrite[]): Promise<void> {
  if (!notes.length) return;
  const commonDir = await commonDirOf(cwd);
  const key = `${commonDir}\0${notesRef}`;
  const run = async () =>
    withFileLock(path.join(commonDir, 'echodo-notes.lock'), async () => {
      for (let attempt = 1; ; attempt++) {
        try {
          return await writeNotesOnce(cwd, key, notesRef, notes, attempt === 1);
        } catch (err) {
          knownRefs.delete(key);
          // Someone outside our lock (an operator's `git notes`, a locked ref) got in the way.
          if (!(err instanceof GitError) || attempt >= 5) throw err;
          await sleep(attempt * 20 + Math.random() * 20);
        }
      }
    }, { staleMs: STALE_LOCK_MS, what: 'notes' });
  const previous = queues.get(commonDir) ?? Promise.resolve();
  const mine = previous.then(run, run);
  queues.set(commonDir, mine.catch(() => {}));
  return mine;
}

export function writeCheckpointNote(cwd: string, notesRef: string, commitOid: string, note: CheckpointNote): Promise<void> {
  return writeCheckpointNotes(cwd, notesRef, [{ commitOid, note }]);
}

/** The commits that carry a note under the ref (one `git notes list`). */
export async function notedCommits(cwd: string, notesRef: string): Promise<Set<string>> {
  const r = await runGit(cwd, ['notes', `--ref=${notesRef}`, 'list'], { allowExitCodes: [1, 128] });
  return new Set(r.stdout.split('\n').filter(Boolean).map((line) => line.split(' ')[1]!));
}

/** The note on a commit, parsed; undefined when there is none or it is not our JSON. */
export async function readCheckpointNote(cwd: string, notesRef: string, commitOid: string): Promise<CheckpointNote | undefined> {
  const r = await runGit(cwd, ['notes', `--ref=${notesRef}`, 'show', commitOid], { allowExitCodes: [1, 128] });
  if (r.exitCode !== 0) return undefined;
  try {
    return JSON.parse(r.stdout) as CheckpointNote;
  } catch {
    return undefined;
  }
}
