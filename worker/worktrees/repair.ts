// Repair of what a worker killed inside `git worktree add` leaves behind. git makes a worktree's
// admin folder (<commondir>/worktrees/<name>) one file at a time: `locked` ("initializing"),
// `gitdir`, the worktree's `.git` file, `commondir`, a placeholder `HEAD`, then the real HEAD; a
// kill between two writes (or inside one: an empty file) leaves a folder that breaks later
// `git worktree add`s for every run on the repository (an empty `commondir` is fatal to all of
// them), and `git worktree prune` keeps it because of `locked`. Only folders that belong to this
// product's worktrees (their `gitdir` points under WORKER_WORKTREE_BASE) are ever touched, and
// only under the repository's worktree lock (worktree.ts), so none is half made by a live worker.
import { readFileSync, realpathSync } from 'node:fs';
import { lstat, mkdir, readdir, realpath, rm, chmod } from 'node:fs/promises';
import path from 'node:path';
import { EchodoError } from '../../core/errors.ts';
import type { Logger } from '../log.ts';

const HEAD_OK = /^(ref: refs\/\S+|[0-9a-f]{40}|[0-9a-f]{64})$/;
const ZERO_OID = /^0+$/;

// The reads that judge a worktree are one small file each, read synchronously: through the thread
// pool each would wait behind whatever else is queued there (a resume's file hashes, a checkpoint's
// writes), several ms apiece on a busy machine, for a syscall of microseconds.
export function readTrimmed(file: string): string | undefined {
  try {
    return readFileSync(file, 'utf8').trim();
  } catch {
    return undefined;
  }
}

export function realpathOrUndefined(file: string): string | undefined {
  try {
    return realpathSync(file);
  } catch {
    return undefined;
  }
}

/** Why an admin folder is not a complete one, or undefined when it is. */
export function adminFolderProblem(adminDir: string, commonDir: string): string | undefined {
  const [commondir, head, locked] = ['commondir', 'HEAD', 'locked'].map((f) => readTrimmed(path.join(adminDir, f)));
  if (!commondir) return commondir === undefined ? 'commondir missing' : 'commondir empty';
  const common = realpathOrUndefined(path.resolve(adminDir, commondir));
  if (common !== commonDir) return `commondir points at ${common ?? 'a missing folder'}`;
  if (!head) return head === undefined ? 'HEAD missing' : 'HEAD empty';
  if (!HEAD_OK.test(head) || ZERO_OID.test(head)) return "HEAD is git's placeholder";
  if (locked === 'initializing') return 'left locked "initializing" by git worktree add';
  return undefined;
}

/** The admin folder a worktree's `.git` file points at, or undefined (no file, not a pointer). */
export function pointerOf(worktreePath: string): string | undefined {
  const pointer = readTrimmed(path.join(worktreePath, '.git'));
  if (!pointer?.startsWith('gitdir:')) return undefined;
  return path.resolve(worktreePath, pointer.slice('gitdir:'.length).trim());
}

function isUnder(child: string, parent: string): boolean {
  return child.startsWith(parent.endsWith(path.sep) ? parent : parent + path.sep);
}

/**
 * Removes the repository's half-made admin folders of this product's worktrees, and the worktree
 * folders made with them. Returns one line per repair. Call it holding the repository's worktree lock.
 * `ownRunId` also claims admin folders git named after the run (`<id>`, `<id>1`, …) that a kill
 * left without even their `gitdir` file: nothing else says whose they are.
 */
export async function repairAdminFolders(args: {
  commonDir: string;
  worktreeBase: string;
  ownRunId: string;
  log: Logger;
}): Promise<string[]> {
  const adminRoot = path.join(args.commonDir, 'worktrees');
  const names = await readdir(adminRoot).catch(() => [] as string[]);
  if (!names.length) return [];
  const base = await realpath(args.worktreeBase).catch(() => path.resolve(args.worktreeBase));
  const repairs: string[] = [];
  for (const name of names) {
    const adminDir = path.join(adminRoot, name);
    if (!(await lstat(adminDir).catch(() => undefined))?.isDirectory()) continue;
    const gitdir = readTrimmed(path.join(adminDir, 'gitdir'));
    if (!gitdir) {
      if (name.startsWith(args.ownRunId) && /^\d*$/.test(name.slice(args.ownRunId.length))) {
        await rm(adminDir, { recursive: true, force: true });
        repairs.push(`removed the run's half-made worktree admin folder ${adminDir} (no gitdir)`);
      }
      continue;
    }
    const worktreePath = path.dirname(path.resolve(adminDir, gitdir));
    if (!isUnder(worktreePath, base)) continue; // not a worktree this product made: never touched
    let problem = adminFolderProblem(adminDir, args.commonDir);
    const folder = await lstat(worktreePath).catch(() => undefined);
    const pointer = folder?.isDirectory() ? pointerOf(worktreePath) : undefined;
    if (!problem && !folder) problem = `its worktree ${worktreePath} is missing`;
    else if (!problem && !folder!.isDirectory()) problem = `its worktree ${worktreePath} is not a folder`;
    else if (!problem && !pointer) problem = `its worktree ${worktreePath} has no .git file`;
    else if (!problem && pointer !== adminDir) problem = `its worktree ${worktreePath} belongs to ${pointer}`;
    if (!problem) continue;
    await rm(adminDir, { recursive: true, force: true });
    // The worktree folder goes with it when it was made with it: no .git file yet, or one that
    // points back here. A folder that points elsewhere is someone else's and stays.
    const madeWithIt = folder?.isDirectory() && (!pointer || pointer === adminDir);
    if (madeWithIt) await rm(worktreePath, { recursive: true, force: true });
    const line = `removed half-made worktree admin folder ${adminDir} (${problem})${madeWithIt ? ` and its worktree folder ${worktreePath}` : ''}`;
    args.log.warn({ adminDir, worktreePath, problem }, 'removed a half-made worktree admin folder');
    repairs.push(line);
  }
  return repairs;
}

/**
 * The worktree base and the workspace folder under it: created 0700 (every run's code is in
 * there), and refused when one is a symlink (or anything but a folder): a planted link would send
 * every worktree, and every `rm` of one, somewhere else.
 */
export async function ensurePrivateDir(dir: string, what: string): Promise<void> {
  let st = await lstat(dir).catch(() => undefined);
  if (!st) {
    await mkdir(dir, { recursive: true, mode: 0o700 });
    st = await lstat(dir);
    // mkdir follows nothing, but a link planted between the two calls would be followed from here on.
    if (!st.isSymbolicLink() && st.isDirectory()) await chmod(dir, 0o700);
  }
  if (st.isSymbolicLink()) {
    throw new EchodoError(
      'io_failure',
      `${what} ${dir} is a symbolic link; refusing to make worktrees through it (point ${what} at a real folder)`,
    );
  }
  if (!st.isDirectory()) throw new EchodoError('io_failure', `${what} ${dir} is not a folder`);
  if (typeof process.getuid === 'function' && st.uid !== process.getuid()) {
    throw new EchodoError(
      'io_failure',
      `${what} ${dir} belongs to uid ${st.uid}, not to this worker (uid ${process.getuid()}); refusing to use it`,
    );
  }
  if ((st.mode & 0o077) !== 0) await chmod(dir, 0o700); // a base made before this check, or by hand
}
