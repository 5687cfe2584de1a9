// Taking the host's spare worktree for a run (spares.ts has the spare's life before
// that): the folder is renamed into place (every file keeps its inode and ctime, so the index's
// stat data stays valid), its admin folder pointed at the new path, HEAD put on the run's branch,
// and one two-way `git read-tree -m -u` writes only the files that differ from the target commit;
// none at all when the remote standby aimed the spare at that commit. Under the repository's
// worktree lock. The spare's index stays aside (index.taking) until the checkout is complete, so a
// kill anywhere leaves a half-made run worktree, which prepareWorktree removes and makes again.
import { readdir, readFile, realpath, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import { EchodoError } from '../../core/errors.ts';
import { faultPoint } from '../faults.ts';
import { resolveCommit, runGit } from '../git/run-git.ts';
import type { Logger } from '../log.ts';
import { AIM_MARK, HIDDEN_INDEX, TAKE_INDEX_CONFIG, tidySpares, writeAtomically, type Spare } from './spares.ts';

/** git refuses to check one branch out in two worktrees; so does taking a spare. */
async function assertBranchFree(commonDir: string, branch: string, exceptAdmin: string): Promise<void> {
  const want = `ref: refs/heads/${branch}`;
  const heads = [path.join(commonDir, 'HEAD')];
  for (const name of await readdir(path.join(commonDir, 'worktrees')).catch(() => [] as string[])) {
    const admin = path.join(commonDir, 'worktrees', name);
    if (admin !== exceptAdmin) heads.push(path.join(admin, 'HEAD'));
  }
  for (const head of heads) {
    if ((await readFile(head, 'utf8').catch(() => '')).trim() === want) {
      throw new EchodoError(
        'repo_invalid',
        `branch ${branch} is already checked out in another worktree (${path.dirname(head)})`,
      );
    }
  }
}

export interface TakenSpare {
  /** The commit the worktree is at, clean. */
  headOid: string;
  /** The spare was already checked out there (aimed by the remote standby): no file was written. */
  aimed: boolean;
  /** The spare's folder before it was moved. */
  from: string;
}

/**
 * Takes the repository's spare for a run, if there is a complete one: renamed to `wtPath` (which
 * must not exist), HEAD on `branch` (created at baseOid when missing, as `git worktree add -b`
 * does), the branch and the files at `checkoutOid` (default: the branch tip). Under the lock;
 * undefined: no spare (or one that could not be taken, removed: the caller adds a worktree).
 */
export async function takeSpareLocked(args: {
  /** The repository: refs are read and moved there (its git config is known to this process already). */
  repoPath: string;
  commonDir: string;
  worktreeBase: string;
  wtPath: string;
  branch: string;
  baseOid: string;
  checkoutOid?: string;
  /** The branch's tip, when the caller just set it (else looked up). */
  branchAt?: string;
  log: Logger;
}): Promise<TakenSpare | undefined> {
  const { spare } = await tidySpares(args);
  if (!spare) return undefined;
  await assertBranchFree(args.commonDir, args.branch, spare.admin);
  const hidden = path.join(spare.admin, HIDDEN_INDEX);
  // The index goes aside first: from here until the checkout is complete, whatever a kill leaves
  // (in .spare or at the run's path) is half made and is removed, never used.
  try {
    await rename(path.join(spare.admin, 'index'), hidden);
  } catch (err) {
    // Gone since it was inspected: only if this worker was paused long enough for its lock to be
    // taken over as stale and another taker got there first. As for every step here that fails,
    // the spare is not used and the run adds its worktree.
    args.log.warn(
      { spare: spare.dir, error: (err as Error).message },
      'the spare worktree went away while being taken; adding one instead',
    );
    return undefined;
  }
  try {
    await rename(spare.dir, args.wtPath);
  } catch (err) {
    // Another filesystem (EXDEV) or the like: the spare stays a spare, the run adds its worktree.
    await rename(hidden, path.join(spare.admin, 'index')).catch(() => {});
    args.log.warn(
      { error: (err as Error).message },
      'could not move the spare worktree into place; adding one instead',
    );
    return undefined;
  }
  faultPoint('after-spare-move');
  let target: string;
  try {
    target = await pointAndCheckOut({ ...args, spare, hidden });
  } catch (err) {
    // Whatever failed, the run is not left with a half-taken spare: removed, and added as before.
    await rm(spare.admin, { recursive: true, force: true });
    await rm(args.wtPath, { recursive: true, force: true });
    args.log.warn({ error: (err as Error).message }, 'taking the spare worktree failed; adding one instead');
    return undefined;
  }
  // The index last: the worktree is complete from here on (inspectWorktree).
  await rename(hidden, path.join(spare.admin, 'index'));
  faultPoint('after-worktree-checkout');
  const aimed = spare.head === target;
  args.log.info(
    { worktreePath: args.wtPath, spare: spare.dir, from: spare.head, to: target, aimed },
    'spare worktree taken',
  );
  return { headOid: target, aimed, from: spare.dir };
}

/** The moved spare made the run's: admin pointer, HEAD on the branch, checked out at the target. */
async function pointAndCheckOut(args: {
  repoPath: string;
  wtPath: string;
  branch: string;
  baseOid: string;
  checkoutOid?: string;
  branchAt?: string;
  spare: Spare;
  hidden: string;
}): Promise<string> {
  const { spare } = args;
  const dotGit = path.join(await realpath(path.dirname(args.wtPath)), path.basename(args.wtPath), '.git');
  await writeAtomically(path.join(spare.admin, 'gitdir'), `${dotGit}\n`);
  // git 2.39 writes an absolute .git file, which stays right; a relative one (newer git) is not.
  if (!path.isAbsolute((await readFile(dotGit, 'utf8')).trim().replace(/^gitdir:\s*/, ''))) {
    await writeAtomically(dotGit, `gitdir: ${spare.admin}\n`);
  }
  const ref = `refs/heads/${args.branch}`;
  const tip = args.branchAt ?? (await resolveCommit(args.repoPath, ref));
  const target = args.checkoutOid ?? tip ?? args.baseOid;
  // "" as the old value: created only if it still does not exist (as `git worktree add -b`).
  if (!tip)
    await runGit(args.repoPath, ['update-ref', '-m', `branch: Created from ${args.baseOid}`, ref, args.baseOid, '']);
  const at = tip ?? args.baseOid;
  if (at !== target) await runGit(args.repoPath, ['update-ref', '-m', `reset: moving to ${target}`, ref, target, at]);
  await writeAtomically(path.join(spare.admin, 'HEAD'), `ref: refs/heads/${args.branch}\n`);
  await rm(path.join(spare.admin, AIM_MARK), { force: true }); // the run's admin folder now
  faultPoint('after-worktree-admin');
  // Aimed at this checkpoint by the remote standby: checked out there, its index clean, so no git
  // runs in the worktree. Its untracked cache is keyed to the spare's path: git ignores it
  // (silently) until the first status after a command re-keys it (content.ts changedPathsByGit).
  if (spare.head === target) return target;
  // Two-way merge from the spare's commit to the target: the index matches the spare's commit
  // exactly (nothing writes in a spare), so only the entries that differ between the two trees
  // are written; every other file is left as it is, unread (but git reads every tree of both
  // commits). The config keeps the untracked cache (its recorded location
  // is now the run's path) and the split index, as addWorktree sets them.
  await runGit(args.wtPath, [...TAKE_INDEX_CONFIG, 'read-tree', '-m', '-u', spare.head, target], {
    env: { GIT_INDEX_FILE: args.hidden },
  });
  return target;
}
