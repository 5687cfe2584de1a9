// Warm spare worktrees (docs/checkpoints.md "Spare worktree"): one registered, fully checked-out,
// detached worktree per repository per host, under WORKER_WORKTREE_BASE/.spare/<repo key>/, made
// off the critical path. A run that needs a new worktree takes it (spare-take.ts) instead of
// `git worktree add` + a checkout of every file.
//
// With a checkpoint remote, the remote standby may aim the spare at the latest checkpoint of a run
// that looks abandoned on another host (worker/remote/standby.ts): its take then writes no file at all.
//
// Everything here runs under the repository's worktree lock (the one worktree.ts creates
// worktrees under): a spare is made, refreshed, repaired and taken by one process at a time.
// Crash safety rests on the rule inspectWorktree already applies: a worktree without an index in
// its admin folder is half made. A spare being refreshed or taken has its index renamed aside
// (index.taking) until its checkout is complete, so a kill at any point leaves either a complete
// spare, a half-made spare (removed when the next one is made) or a half-made run worktree
// (removed and made again by prepareWorktree).
import { createHash, randomInt } from 'node:crypto';
import { existsSync } from 'node:fs';
import { lstat, readdir, readFile, realpath, rename, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { faultPoint } from '../faults.ts';
import { resolveCommit, runGit } from '../git/run-git.ts';
import type { Logger } from '../log.ts';
import { adminFolderProblem, ensurePrivateDir, pointerOf, repairAdminFolders } from './repair.ts';

/** The folder of spares under WORKER_WORKTREE_BASE; never a workspace id (those cannot start with a dot). */
export const SPARE_FOLDER = '.spare';
/** The repository's worktree lock: worktree creation, repair and everything about spares. */
export const worktreeLockPath = (commonDir: string) => path.join(commonDir, 'echodo-worktrees.lock');
export const WORKTREE_LOCK_OPTIONS = { staleMs: 10_000, timeoutMs: 120_000 };

export const HIDDEN_INDEX = 'index.taking';
/** In a spare's admin folder: the commit the remote standby aimed it at (the keeper leaves it there). */
export const AIM_MARK = 'echodo-aimed';
/**
 * How long an aimed spare stays aimed after its run last looked abandoned (the standby renews the
 * mark every sweep until then). The run stops looking abandoned the moment a worker claims it,
 * which may be a worker of this host about to take the spare as it is.
 */
export const AIM_HOLD_MS = 30_000;
/** The take's `read-tree` keeps the untracked cache and the split index, as addWorktree sets them. */
export const TAKE_INDEX_CONFIG: readonly string[] = ['-c', 'core.untrackedCache=true', '-c', 'core.splitIndex=true'];
const OID = /^[0-9a-f]{40}([0-9a-f]{24})?$/;

/** A short, stable key per repository: one host's base can serve many repositories. */
function repoKey(commonDir: string): string {
  return createHash('sha256').update(commonDir).digest('hex').slice(0, 16);
}

/** Spare names end in digits only, so repairAdminFolders' "named after the owner" rule covers them. */
const sparePrefix = (commonDir: string) => `echodo-spare-${repoKey(commonDir)}-`;

export function spareFolderFor(worktreeBase: string, commonDir: string): string {
  return path.join(worktreeBase, SPARE_FOLDER, repoKey(commonDir));
}

/** Atomic small-file write: a kill leaves the old content or the new, never an empty file. */
export async function writeAtomically(file: string, content: string): Promise<void> {
  const temp = `${file}.echodo-${process.pid}`;
  await writeFile(temp, content);
  await rename(temp, file);
}

export interface Spare {
  dir: string;
  admin: string;
  head: string;
}

/** Why `dir` is not a complete spare of this repository, or the spare. */
async function inspectSpare(dir: string, commonDir: string): Promise<Spare | string> {
  const admin = pointerOf(dir);
  if (!admin) return 'no .git file';
  if (!existsSync(admin)) return `its .git file points at a missing admin folder ${admin}`;
  const adminParent = await realpath(path.dirname(admin)).catch(() => '');
  if (adminParent !== path.join(commonDir, 'worktrees')) return 'its admin folder is not in this repository';
  const problem = adminFolderProblem(admin, commonDir);
  if (problem) return problem;
  const gitdir = (await readFile(path.join(admin, 'gitdir'), 'utf8').catch(() => '')).trim();
  const [registered, here] = await Promise.all([realpath(path.dirname(gitdir)).catch(() => ''), realpath(dir)]);
  if (registered !== here) return `its admin folder is registered for ${gitdir || 'nothing'}`;
  const head = (await readFile(path.join(admin, 'HEAD'), 'utf8')).trim();
  if (!OID.test(head)) return 'HEAD is not detached';
  if (!existsSync(path.join(admin, 'index'))) return 'never checked out (no index)';
  return { dir, admin, head };
}

/** Removes a spare folder and, when it points back at it, its admin folder. */
async function removeSpare(dir: string): Promise<void> {
  const admin = pointerOf(dir);
  if (admin) {
    // Only the admin folder registered for this folder (or for nothing): never a run's.
    const gitdir = (await readFile(path.join(admin, 'gitdir'), 'utf8').catch(() => '')).trim();
    const registered = gitdir ? await realpath(path.dirname(gitdir)).catch(() => path.dirname(gitdir)) : '';
    if (!gitdir || registered === (await realpath(dir).catch(() => dir)))
      await rm(admin, { recursive: true, force: true });
  }
  await rm(dir, { recursive: true, force: true });
}

/**
 * The repository's spares: half-made ones (a worker killed while making, refreshing or taking
 * one) and any beyond the first removed; the complete one, if any, returned. Under the lock.
 */
export async function tidySpares(args: {
  commonDir: string;
  worktreeBase: string;
  log: Logger;
}): Promise<{ spare?: Spare; repairs: string[] }> {
  const folder = spareFolderFor(args.worktreeBase, args.commonDir);
  // Admin folders of spares that a kill inside `git worktree add` left without even a gitdir file.
  const repairs = await repairAdminFolders({
    commonDir: args.commonDir,
    worktreeBase: args.worktreeBase,
    ownRunId: sparePrefix(args.commonDir),
    log: args.log,
  });
  let spare: Spare | undefined;
  for (const name of await readdir(folder).catch(() => [] as string[])) {
    const dir = path.join(folder, name);
    const found = (await lstat(dir)).isDirectory() ? await inspectSpare(dir, args.commonDir) : 'not a folder';
    if (typeof found !== 'string' && !spare) {
      spare = found;
      continue;
    }
    await removeSpare(dir);
    const why = typeof found === 'string' ? `half made: ${found}` : 'one spare per repository is enough';
    args.log.warn({ spare: dir, problem: why }, 'removed a spare worktree');
    repairs.push(`removed the spare worktree ${dir} (${why})`);
  }
  return { spare, repairs };
}

export interface SpareOutcome {
  path: string | null;
  /** made: a new one; refreshed: brought to its target; ready: already there; none: nothing to check out. */
  action: 'made' | 'refreshed' | 'ready' | 'none';
  repairs: string[];
  /** When made or refreshed: Date.now() once the checkout had written its last file (settleSpareLocked). */
  checkedOutAt?: number;
}

/** The commit the standby aimed `spare` at, while it is still there, and when it last renewed that; else undefined. */
async function aimOf(spare: Spare): Promise<{ commit: string; renewedAt: number } | undefined> {
  const mark = path.join(spare.admin, AIM_MARK);
  const commit = (await readFile(mark, 'utf8').catch(() => '')).trim();
  const renewedAt = commit === spare.head ? (await stat(mark).catch(() => undefined))?.mtimeMs : undefined;
  return renewedAt === undefined ? undefined : { commit, renewedAt };
}

/** Written once the checkout is complete: a kill before it leaves an unaimed spare, the keeper's. */
async function markAim(admin: string, aim: string | null | undefined): Promise<void> {
  if (aim) await writeAtomically(path.join(admin, AIM_MARK), `${aim}\n`);
  else await rm(path.join(admin, AIM_MARK), { force: true });
}

/**
 * Makes the repository's spare, or brings the one there to its target. Call it holding the
 * repository's worktree lock (spare-keeper.ts makeSpareWorktree does). The target:
 *  - `aim` undefined (the keeper): the repository's HEAD, unless the remote standby aimed the
 *    spare (then it is left where it is: it serves any run, and the standby lets it go);
 *  - `aim` a commit (the remote standby): that commit, marked as aimed (the mark renewed);
 *  - `aim` null (the standby, no run looks abandoned): an aimed spare back to the repository's
 *    HEAD, unmarked; an unaimed one is the keeper's, left as it is.
 * An aimed spare whose mark was renewed within AIM_HOLD_MS is not aimed elsewhere or let go.
 */
export async function makeSpareLocked(args: {
  repoPath: string;
  commonDir: string;
  worktreeBase: string;
  aim?: string | null;
  log: Logger;
}): Promise<SpareOutcome> {
  const folder = spareFolderFor(args.worktreeBase, args.commonDir);
  await ensurePrivateDir(args.worktreeBase, 'WORKER_WORKTREE_BASE');
  await ensurePrivateDir(path.dirname(folder), 'the spare worktree folder');
  await ensurePrivateDir(folder, 'the spare worktree folder');
  const { spare, repairs } = await tidySpares(args);
  const aimed = spare && (await aimOf(spare));
  const held = aimed && aimed.commit !== args.aim && Date.now() - aimed.renewedAt < AIM_HOLD_MS;
  if (spare && (aimed ? args.aim === undefined || held : args.aim === null))
    return { path: spare.dir, action: 'ready', repairs };
  const target = args.aim ?? (await resolveCommit(args.repoPath, 'HEAD'));
  if (!target) return { path: spare?.dir ?? null, action: 'none', repairs };
  if (spare) {
    if (spare.head === target) {
      await markAim(spare.admin, args.aim);
      return { path: spare.dir, action: 'ready', repairs };
    }
    // Brought to the target, its index hidden meanwhile (a kill: half made).
    const hidden = path.join(spare.admin, HIDDEN_INDEX);
    await rename(path.join(spare.admin, 'index'), hidden);
    await runGit(spare.dir, ['reset', '--hard', '--quiet', target], { env: { GIT_INDEX_FILE: hidden } });
    const checkedOutAt = Date.now();
    await rename(hidden, path.join(spare.admin, 'index'));
    await markAim(spare.admin, args.aim);
    return { path: spare.dir, action: 'refreshed', repairs, checkedOutAt };
  }
  const dir = path.join(folder, `${sparePrefix(args.commonDir)}${Date.now()}${randomInt(1_000_000)}`);
  await runGit(args.repoPath, ['worktree', 'add', '--quiet', '--no-checkout', '--detach', dir, target]);
  faultPoint('after-spare-admin');
  // As addWorktree: the checkout writes the index last; untracked cache and split index on.
  await runGit(dir, ['read-tree', '--reset', '-u', 'HEAD']);
  const checkedOutAt = Date.now();
  await runGit(dir, ['update-index', '--untracked-cache', '--split-index']).catch((err) =>
    args.log.warn(
      { error: (err as Error).message },
      'could not enable the untracked cache / split index on the spare; continuing without',
    ),
  );
  faultPoint('after-spare-checkout');
  await markAim(pointerOf(dir)!, args.aim);
  return { path: dir, action: 'made', repairs, checkedOutAt };
}

/**
 * Racy git: an index entry whose file was written in the same second as the index (this git
 * compares whole seconds) is "racily clean", so every later write of that index re-reads and
 * hashes its file. For a spare just checked out, that is every file, at the take's read-tree
 * (several times its cost). So, once the clock has left the second of the
 * checkout's last write (spare-keeper.ts waits for it outside the lock), the index is written
 * once more. Under the lock; false when the spare is no longer there as it was (taken or
 * replaced meanwhile): nothing to do.
 */
export async function settleSpareLocked(args: { dir: string; commonDir: string }): Promise<boolean> {
  if (typeof (await inspectSpare(args.dir, args.commonDir)) === 'string') return false; // gone, taken or half made
  await runGit(args.dir, ['update-index', '-q', '--refresh', '--force-write-index'], { allowExitCodes: [1] });
  return true;
}

/** Removes every spare of the repository (spares switched off). Under the lock. */
export async function removeSparesLocked(args: {
  commonDir: string;
  worktreeBase: string;
  log: Logger;
}): Promise<number> {
  const folder = spareFolderFor(args.worktreeBase, args.commonDir);
  const names = await readdir(folder).catch(() => [] as string[]);
  for (const name of names) await removeSpare(path.join(folder, name));
  if (names.length) args.log.info({ folder, removed: names.length }, 'spare worktrees switched off: removed');
  return names.length;
}

// The process's keeper of spares (spare-keeper.ts), told when a worktree was made here so that
// the repository's spare is made again in the background. None outside the daemon.
let spareListener: ((repoPath: string) => void) | undefined;

export function setSpareListener(listener: ((repoPath: string) => void) | undefined): void {
  spareListener = listener;
}

export function spareWanted(repoPath: string): void {
  spareListener?.(repoPath);
}
