// Step 3 of a checkpoint: mirror the row as a git note on the checkpoint commit.
// Notes refs are shared by every worktree of a repo, and concurrent `git notes add` silently
// loses notes, so every write goes through one writer per repository: an in-process queue, a
// cross-process lock file in the common git dir, and a compare-and-set ref update (fast-import
// refuses a non-fast-forward update, so a writer that raced anyway retries instead of losing).
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { GitError, runGit } from '../git/run-git.ts';
import { redactString } from '../../core/redact.ts';
import { withFileLock } from '../../core/file-lock.ts';
import { fastImport } from './git/fast-import.ts';
import type { CheckpointRow } from '../../store/checkpoints.ts';

export interface CheckpointNote {
  workspaceId: string;
  agentRunId: string;
  checkpointSeq: number;
  step: number;
  hash: string;
  prevHash: string | null;
  branch: string | null;
  files: { path: string; sha256: string | null }[];
  /** The run's summary at this checkpoint (rows of the delta format): its tree and manifest. */
  treeOid?: string | null;
  manifestDigest?: string;
  manifestCount?: number;
}

/** The one way a note is made: paths and hashes only, never a file's content. */
export function checkpointNote(
  n: Omit<CheckpointNote, 'files'> & { files: { path: string; sha256: string | null }[] },
): CheckpointNote {
  const note: CheckpointNote = {
    workspaceId: n.workspaceId,
    agentRunId: n.agentRunId,
    checkpointSeq: n.checkpointSeq,
    step: n.step,
    hash: n.hash,
    prevHash: n.prevHash,
    branch: n.branch,
    files: n.files.map((f) => ({ path: f.path, sha256: f.sha256 })),
  };
  if (n.treeOid !== undefined)
    Object.assign(note, { treeOid: n.treeOid, manifestDigest: n.manifestDigest, manifestCount: n.manifestCount });
  return note;
}

/** The note of a stored checkpoint row (rewriting a lost note, mirroring to the remote). */
export function noteOfRow(row: CheckpointRow): CheckpointNote {
  return checkpointNote({
    workspaceId: row.workspace_id,
    agentRunId: row.agent_run_id,
    checkpointSeq: row.checkpoint_seq,
    step: row.step,
    hash: row.hash,
    prevHash: row.prev_hash,
    branch: row.branch,
    files: row.files_touched,
    ...(row.payload_format === 3
      ? { treeOid: row.tree_oid, manifestDigest: row.manifest_digest!, manifestCount: row.manifest_count! }
      : {}),
  });
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
function fastImportScript(notesRef: string, notes: NoteWrite[], hasParent: boolean, stamp: number): string {
  const message = `echodo checkpoint note${notes.length > 1 ? 's' : ''}\n`;
  const lines = [
    `commit ${notesRef}`,
    `committer echodo-worker <echodo-worker@localhost> ${stamp} +0000`,
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

async function writeNotesOnce(
  cwd: string,
  key: string,
  notesRef: string,
  notes: NoteWrite[],
  trustCache: boolean,
): Promise<void> {
  let hasParent = trustCache && knownRefs.has(key);
  if (!hasParent)
    hasParent =
      (await runGit(cwd, ['rev-parse', '--verify', '--quiet', notesRef], { allowExitCodes: [1] })).exitCode === 0;
  await fastImport(cwd, (stamp) => fastImportScript(notesRef, notes, hasParent, stamp));
  knownRefs.add(key);
}

/**
 * One notes-ref update at a time per repository: an in-process queue, the cross-process lock file
 * in the common git dir, and up to 5 attempts when someone outside the lock (an operator's
 * `git notes`, a locked ref) got in the way: the ref only ever moves by compare-and-set.
 */
async function serialized<T>(
  cwd: string,
  attempt: (n: number) => Promise<T>,
  onRetry: () => void = () => {},
): Promise<T> {
  const commonDir = await commonDirOf(cwd);
  const run = async () =>
    withFileLock(
      path.join(commonDir, 'echodo-notes.lock'),
      async () => {
        for (let n = 1; ; n++) {
          try {
            return await attempt(n);
          } catch (err) {
            onRetry();
            if (!(err instanceof GitError) || n >= 5) throw err;
            await sleep(n * 20 + Math.random() * 20);
          }
        }
      },
      { staleMs: STALE_LOCK_MS, what: 'notes' },
    );
  const previous = queues.get(commonDir) ?? Promise.resolve();
  const mine = previous.then(run, run);
  queues.set(
    commonDir,
    mine.catch(() => {}),
  );
  return mine;
}

/** Writes (or overwrites) notes in one notes commit. Serialized per repository; retries a lost race. */
export async function writeCheckpointNotes(cwd: string, notesRef: string, notes: NoteWrite[]): Promise<void> {
  if (!notes.length) return;
  const key = `${await commonDirOf(cwd)}\0${notesRef}`;
  return serialized(
    cwd,
    (n) => writeNotesOnce(cwd, key, notesRef, notes, n === 1),
    () => knownRefs.delete(key),
  );
}

/**
 * Prune's side of the mirror (operator/prune.ts): removes the notes on `commits` and replaces the
 * notes ref by one commit without parents that holds the notes left. A notes ref's history keeps
 * every note it ever held, so removing notes alone gives no byte back; without that history the
 * repository's next `git gc` (past its prune expiry) does. Nothing reads the history (a note is
 * the current mirror of its row), nor the ref's reflog, which goes too. Returns how many notes
 * were removed (0: the ref is untouched).
 */
export async function dropCheckpointNotes(cwd: string, notesRef: string, commits: string[]): Promise<number> {
  if (!commits.length) return 0;
  const drop = new Set(commits);
  return serialized(cwd, async () => {
    const tip = (
      await runGit(cwd, ['rev-parse', '--verify', '--quiet', `${notesRef}^{commit}`], { allowExitCodes: [1] })
    ).stdout.trim();
    if (!tip) return 0;
    const listing = await runGit(cwd, ['ls-tree', '-r', '-z', '--name-only', tip]);
    const paths = listing.stdout.split('\0').filter((p) => p && drop.has(p.replaceAll('/', '')));
    if (!paths.length) return 0;
    // The new tree on a scratch index (and an empty scratch work tree, which update-index wants
    // even in a bare repository): the fanout folders stay as they are, only the notes go.
    const scratch = await mkdtemp(path.join(os.tmpdir(), 'echodo-notes-'));
    const env = { GIT_INDEX_FILE: path.join(scratch, 'index'), GIT_WORK_TREE: scratch };
    const git = (args: string[], input?: string) =>
      runGit(cwd, ['-c', 'core.splitIndex=false', ...args], { env, input });
    try {
      await git(['read-tree', tip]);
      await git(['update-index', '--force-remove', '-z', '--stdin'], paths.join('\0'));
      const tree = (await git(['write-tree'])).stdout.trim();
      const message = `echodo: the notes of ${paths.length} pruned checkpoint(s) removed, the notes' history squashed`;
      const commit = (await runGit(cwd, ['commit-tree', tree, '-m', message])).stdout.trim();
      await runGit(cwd, ['update-ref', notesRef, commit, tip]);
      // The ref's reflog would keep the old history reachable for gc.reflogExpireUnreachable (30
      // days). Housekeeping only: a repository without one (bare) fails here, and that is fine.
      await runGit(cwd, ['reflog', 'expire', '--expire=now', '--expire-unreachable=now', notesRef]).catch(() => {});
      return paths.length;
    } finally {
      await rm(scratch, { recursive: true, force: true });
    }
  });
}

export function writeCheckpointNote(
  cwd: string,
  notesRef: string,
  commitOid: string,
  note: CheckpointNote,
): Promise<void> {
  return writeCheckpointNotes(cwd, notesRef, [{ commitOid, note }]);
}

/** The commits that carry a note under the ref (one `git notes list`). */
export async function notedCommits(cwd: string, notesRef: string): Promise<Set<string>> {
  const r = await runGit(cwd, ['notes', `--ref=${notesRef}`, 'list'], { allowExitCodes: [1, 128] });
  return new Set(
    r.stdout
      .split('\n')
      .filter(Boolean)
      .map((line) => line.split(' ')[1]!),
  );
}

/** The note on a commit, parsed; undefined when there is none or it is not our JSON. */
export async function readCheckpointNote(
  cwd: string,
  notesRef: string,
  commitOid: string,
): Promise<CheckpointNote | undefined> {
  const r = await runGit(cwd, ['notes', `--ref=${notesRef}`, 'show', commitOid], { allowExitCodes: [1, 128] });
  if (r.exitCode !== 0) return undefined;
  try {
    return JSON.parse(r.stdout) as CheckpointNote;
  } catch {
    return undefined;
  }
}
