// Worktrees: one per code run, on branch echodo/<briefId>-<first 8 of agentRunId>, made with
// `git worktree add` from the local repo (never a clone), reused when it is healthy.
import { existsSync } from 'node:fs';
import { readFile, realpath, rm, mkdir } from 'node:fs/promises';
import path from 'node:path';
import { simpleGit } from 'simple-git';
import { EchodoError } from './errors.ts';
import { resolveCommit, runGit } from './git.ts';
import { branchName } from './job.ts';
import type { Logger } from './log.ts';

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
}

export async function repoCommonDir(repoPath: string): Promise<string> {
  if (!existsSync(repoPath)) throw new EchodoError('repo_invalid', `repoPath ${repoPath} does not exist`);
  // The usual case, a repository with its .git folder, without spawning git.
  const dotGit = path.join(repoPath, '.git');
  if (existsSync(path.join(dotGit, 'HEAD')) && existsSync(path.join(dotGit, 'objects'))) return realpath(dotGit);
  const r = await runGit(repoPath, ['rev-parse', '--path-format=absolute', '--git-common-dir'], { allowExitCodes: [128] });
  if (r.exitCode !== 0) throw new EchodoError('repo_invalid', `repoPath ${repoPath} is not a git repository`);
  return realpath(path.resolve(r.stdout.trim()));
}

/** Reads a worktree's .git pointer files directly: no process spawned. */
export async function inspectWorktree(worktreePath: string, commonDir: string): Promise<WorktreeState> {
  if (!existsSync(worktreePath)) return { exists: false, belongsToRepo: false };
  try {
    const pointer = (await readFile(path.join(worktreePath, '.git'), 'utf8')).trim();
    const gitDir = path.resolve(worktreePath, pointer.replace(/^gitdir:\s*/, ''));
    const common = await realpath(path.resolve(gitDir, (await readFile(path.join(gitDir, 'commondir'), 'utf8')).trim()));
    const head = (await readFile(path.join(gitDir, 'HEAD'), 'utf8')).trim();
    const branch = head.startsWith('ref: refs/heads/') ? head.slice('ref: refs/heads/'.length) : undefined;
    return { exists: true, belongsToRepo: common === commonDir, branch, gitDir };
  } catch {
    return { exists: true, belongsToRepo: false };
  }
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
  /** The run's branch as claimed in Postgres (worker/branch-ownership.ts); default: the short name. */
  branch?: string;
  /** The run's recorded worktree (a resume keeps it); default: worktreePathFor. */
  worktreePath?: string;
  log: Logger;
}): Promise<PreparedWorktree> {
  const commonDir = await repoCommonDir(args.repoPath);
  const branch = args.branch ?? branchName(args.briefId, args.agentRunId);
  const wtPath = args.worktreePath ?? worktreePathFor(args.worktreeBase, args.workspaceId, args.agentRunId);
  const baseOid = args.knownBaseOid ?? (await resolveCommit(args.repoPath, args.baseRef));
  if (!baseOid) throw new EchodoError('repo_invalid', `baseRef "${args.baseRef}" does not exist in ${args.repoPath}`);

  const state = await inspectWorktree(wtPath, commonDir);
  if (state.exists && state.belongsToRepo && state.branch === branch) return { path: wtPath, branch, baseOid, created: false };
  if (state.exists) {
    // Under our base and named by our run id, but not a usable worktree of this repo: remake it.
    args.log.warn({ worktreePath: wtPath }, 'worktree folder is not a healthy worktree of the repo; recreating it');
    await rm(wtPath, { recursive: true, force: true });
  }

  await mkdir(path.dirname(wtPath), { recursive: true, mode: 0o700 });
  // The repo's hooks must not run (a post-checkout hook would get the worker's environment and
  // could write into the worktree), and git gets a minimal environment, not the worker's.
  const repo = simpleGit({ baseDir: args.repoPath, config: ['core.hooksPath=/dev/null'], unsafe: { allowUnsafeHooksPath: true } })
    .env({ PATH: process.env.PATH, HOME: process.env.HOME, LANG: 'C' });
  await repo.raw(['worktree', 'prune']);
  const branchTip = await resolveCommit(args.repoPath, `refs/heads/${branch}`);
  if (branchTip) await repo.raw(['worktree', 'add', '--quiet', wtPath, branch]);
  else await repo.raw(['worktree', 'add', '--quiet', '-b', branch, wtPath, baseOid]);
  // Faster `git status` (untracked cache) and index writes (split index) for the whole run:
  // every checkpoint and every verification pays them. Both are plain git features.
  await runGit(wtPath, ['update-index', '--untracked-cache', '--split-index']).catch((err) =>
    args.log.warn({ error: (err as Error).message }, 'could not enable the untracked cache / split index; continuing without'),
  );
  worktreeMetrics.created += 1;
  args.log.info({ worktreePath: wtPath, branch, worktreesCreated: worktreeMetrics.created }, 'worktree created');
  return { path: wtPath, branch, baseOid, created: true };
}
