// Worktrees: one per code run, on branch echodo/<briefId>-<first 8 of agentRunId>, made with
// `git worktree add` from the local repo (never a clone), or taken from the host's warm spare
// worktree of the repo (spares.ts), reused when it is healthy.
import { existsSync, realpathSync } from 'node:fs';
import { realpath, rm } from 'node:fs/promises';
import path from 'node:path';
import { EchodoError } from '../../core/errors.ts';
import { faultPoint } from '../faults.ts';
import { resolveCommit, runGit } from '../git/run-git.ts';
import { withFileLock } from '../../core/file-lock.ts';
import {
  adminFolderProblem,
  ensurePrivateDir,
  pointerOf,
  readTrimmed,
  realpathOrUndefined,
  repairAdminFolders,
} from './repair.ts';
import { spareWanted, worktreeLockPath, WORKTREE_LOCK_OPTIONS } from './spares.ts';
import { takeSpareLocked } from './spare-take.ts';
import { branchName } from '../../core/job.ts';
import type { Logger } from '../log.ts';

/** Worktrees this process created; resume must leave it unchanged. */
export const worktreeMetrics = { created: 0 };

export interface WorktreeState {
  exists: boolean;
  /** Registered as a worktree of the expected repository. */
  belongsToRepo: boolean;
  /** The branch HEAD points at (symbolic), if any. */
  branch?: string;
  /** The git dir of this worktree (.git/worktrees/<name>), where index.lock lives. */
  gitDir?: string;
  /** Set when a killed `git worktree add` left it half made: what is missing. */
  halfMade?: string;
}

export async function repoCommonDir(repoPath: string): Promise<string> {
  if (!existsSync(repoPath)) throw new EchodoError('repo_invalid', `repoPath ${repoPath} does not exist`);
  // The usual case, a repository with its .git folder, without spawning git.
  const dotGit = path.join(repoPath, '.git');
  if (existsSync(path.join(dotGit, 'HEAD')) && existsSync(path.join(dotGit, 'objects'))) return realpathSync(dotGit);
  const r = await runGit(repoPath, ['rev-parse', '--path-format=absolute', '--git-common-dir'], {
    allowExitCodes: [128],
  });
  if (r.exitCode !== 0) throw new EchodoError('repo_invalid', `repoPath ${repoPath} is not a git repository`);
  return realpath(path.resolve(r.stdout.trim()));
}

/** Reads a worktree's .git pointer files directly (synchronously: see repair.ts): no process spawned. */
export async function inspectWorktree(worktreePath: string, commonDir: string): Promise<WorktreeState> {
  if (!existsSync(worktreePath)) return { exists: false, belongsToRepo: false };
  const gitDir = pointerOf(worktreePath);
  if (!gitDir) return { exists: true, belongsToRepo: false, halfMade: 'the worktree folder has no .git file' };
  // Its admin folder is in this repository's worktrees/: ours, whatever state it is in.
  const adminParent = realpathOrUndefined(path.dirname(gitDir)) ?? path.dirname(gitDir);
  const ours = adminParent === path.join(commonDir, 'worktrees');
  if (!existsSync(gitDir))
    return { exists: true, belongsToRepo: ours, halfMade: `its .git file points at a missing admin folder ${gitDir}` };
  const problem = adminFolderProblem(gitDir, commonDir);
  if (problem) return { exists: true, belongsToRepo: ours, gitDir, halfMade: `its admin folder ${gitDir}: ${problem}` };
  const head = readTrimmed(path.join(gitDir, 'HEAD')) ?? '';
  const branch = head.startsWith('ref: refs/heads/') ? head.slice('ref: refs/heads/'.length) : undefined;
  // The index is written last, when the checkout is complete (creation below): without it the
  // folder was never checked out.
  if (!existsSync(path.join(gitDir, 'index')))
    return { exists: true, belongsToRepo: true, branch, gitDir, halfMade: 'never checked out (no index)' };
  return { exists: true, belongsToRepo: true, branch, gitDir };
}

/** base/<workspaceId>/<agentRunId>: run ids are unique per workspace only, so the workspace is in the path. */
export function worktreePathFor(worktreeBase: string, workspaceId: string, agentRunId: string): string {
  return path.join(worktreeBase, workspaceId, agentRunId);
}

export interface PreparedWorktree {
  path: string;
  branch: string;
  baseOid: string;
  created: boolean;
  /** When created: the commit it was checked out at (clean). */
  headOid?: string;
  /** When created: made from the host's spare worktree (spares.ts), not by `git worktree add`. */
  fromSpare?: boolean;
  /** That spare was already checked out at the target (the remote standby aimed it): nothing written. */
  spareAimed?: boolean;
  /** What creation had to clean up first (half-made admin folders, the run's own half-made worktree). */
  repairs: string[];
}

/**
 * Makes or reuses the run's worktree. `knownBaseOid` is the commit the branch started from on an
 * earlier attempt; without it baseRef is resolved (and must exist).
 */
export async function prepareWorktree(args: {
  repoPath: string;
  worktreeBase: string;
  workspaceId: string;
  agentRunId: string;
  briefId: string;
  baseRef: string;
  knownBaseOid?: string | null;
  /** The run's branch as claimed in Postgres (worker/worktrees/branches.ts); default: the short name. */
  branch?: string;
  /** The run's recorded worktree (a resume keeps it); default: worktreePathFor. */
  worktreePath?: string;
  /** A worktree made here is checked out at this commit (resume: the checkpoint's); default the branch tip. */
  checkoutOid?: string;
  /** The branch's tip, when the caller just set it: not looked up again. */
  branchAt?: string;
  log: Logger;
}): Promise<PreparedWorktree> {
  const commonDir = await repoCommonDir(args.repoPath);
  const branch = args.branch ?? branchName(args.briefId, args.agentRunId);
  const wtPath = args.worktreePath ?? worktreePathFor(args.worktreeBase, args.workspaceId, args.agentRunId);
  const baseOid = args.knownBaseOid ?? (await resolveCommit(args.repoPath, args.baseRef));
  if (!baseOid) throw new EchodoError('repo_invalid', `baseRef "${args.baseRef}" does not exist in ${args.repoPath}`);

  const healthy = (st: WorktreeState) => st.exists && st.belongsToRepo && !st.halfMade && st.branch === branch;
  if (healthy(await inspectWorktree(wtPath, commonDir)))
    return { path: wtPath, branch, baseOid, created: false, repairs: [] };

  await ensurePrivateDir(args.worktreeBase, 'WORKER_WORKTREE_BASE');
  await ensurePrivateDir(path.dirname(wtPath), 'the workspace worktree folder');
  // One creator per repository at a time, across processes: the repair below must never take a
  // folder another worker is making for half made. A dead or paused holder is taken over.
  const prepared = await withFileLock(
    worktreeLockPath(commonDir),
    async (): Promise<PreparedWorktree> => {
      const repairs = await repairAdminFolders({
        commonDir,
        worktreeBase: args.worktreeBase,
        ownRunId: path.basename(wtPath),
        log: args.log,
      });
      const state = await inspectWorktree(wtPath, commonDir);
      if (healthy(state)) return { path: wtPath, branch, baseOid, created: false, repairs };
      if (state.exists) {
        // Ours (the run's own path, and we hold its lease) but not usable: remade at its branch.
        args.log.warn(
          { worktreePath: wtPath, problem: state.halfMade ?? 'not a worktree of the repo on its branch' },
          "recreating the run's worktree",
        );
        const admin = state.belongsToRepo ? (state.gitDir ?? pointerOf(wtPath)) : undefined;
        if (admin) await rm(admin, { recursive: true, force: true });
        await rm(wtPath, { recursive: true, force: true });
        repairs.push(
          `removed the run's worktree ${wtPath}${state.halfMade ? ` (half made: ${state.halfMade})` : ''}${admin ? ` and its admin folder ${admin}` : ''}`,
        );
      }
      // The host's warm spare when there is one (only the files that differ are written), else
      // `git worktree add` and a checkout of every file.
      const { repoPath, worktreeBase, checkoutOid, branchAt, log } = args;
      const spare = await takeSpareLocked({
        repoPath,
        commonDir,
        worktreeBase,
        wtPath,
        branch,
        baseOid,
        checkoutOid,
        branchAt,
        log,
      });
      const headOid =
        spare?.headOid ?? (await addWorktree({ repoPath: args.repoPath, wtPath, branch, baseOid, log: args.log }));
      worktreeMetrics.created += 1;
      args.log.info(
        { worktreePath: wtPath, branch, fromSpare: !!spare, worktreesCreated: worktreeMetrics.created, repairs },
        'worktree created',
      );
      return {
        path: wtPath,
        branch,
        baseOid,
        created: true,
        headOid,
        fromSpare: !!spare,
        spareAimed: spare?.aimed,
        repairs,
      };
    },
    { ...WORKTREE_LOCK_OPTIONS, what: 'worktree creation' },
  );
  // A worker keeping spares (the daemon, spare-keeper.ts) makes the next one in the background.
  if (prepared.created) spareWanted(args.repoPath);
  return prepared;
}

/**
 * `git worktree add` in two steps, so that a kill can be told apart afterwards: the admin folder
 * and the `.git` file (--no-checkout), then the checkout, which writes the index last. A worktree
 * without an index is half made (inspectWorktree) and made again.
 */
async function addWorktree(args: {
  repoPath: string;
  wtPath: string;
  branch: string;
  baseOid: string;
  log: Logger;
}): Promise<string> {
  const branchTip = await resolveCommit(args.repoPath, `refs/heads/${args.branch}`);
  if (branchTip) await runGit(args.repoPath, ['worktree', 'add', '--quiet', '--no-checkout', args.wtPath, args.branch]);
  else
    await runGit(args.repoPath, [
      'worktree',
      'add',
      '--quiet',
      '--no-checkout',
      '-b',
      args.branch,
      args.wtPath,
      args.baseOid,
    ]);
  faultPoint('after-worktree-admin');
  await runGit(args.wtPath, ['read-tree', '--reset', '-u', 'HEAD']);
  // Faster `git status` (untracked cache) and index writes (split index) for the whole run:
  // every checkpoint and every verification pays them. Both are plain git features.
  await runGit(args.wtPath, ['update-index', '--untracked-cache', '--split-index']).catch((err) =>
    args.log.warn(
      { error: (err as Error).message },
      'could not enable the untracked cache / split index; continuing without',
    ),
  );
  faultPoint('after-worktree-checkout');
  return branchTip ?? args.baseOid;
}
