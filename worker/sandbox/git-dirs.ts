// Where a root's git data lives, read from disk (as worker/worktrees/worktree.ts inspectWorktree does): a worktree's
// `.git` file names its admin dir (.git/worktrees/<id>: HEAD, index), whose `commondir` names the
// repository's shared git dir (every workspace's objects and refs). A plain repository has a
// `.git` folder that is both.
import { lstat, readFile, realpath } from 'node:fs/promises';
import path from 'node:path';
import { ToolRefusedError } from '../../core/errors.ts';

export type GitLayout =
  | { kind: 'none' }
  | { kind: 'worktree'; dotGit: string; adminDir: string; commonDir: string }
  | { kind: 'repo'; dotGit: string };

export async function gitLayout(root: string): Promise<GitLayout> {
  const dotGit = path.join(root, '.git');
  const st = await lstat(dotGit).catch(() => null);
  if (!st) return { kind: 'none' };
  if (st.isDirectory()) return { kind: 'repo', dotGit };
  if (!st.isFile())
    throw new ToolRefusedError(
      "the worktree's .git is neither a file nor a folder; git commands cannot run here",
      'sandbox',
    );
  try {
    const pointer = (await readFile(dotGit, 'utf8')).trim();
    const adminDir = await realpath(path.resolve(root, pointer.replace(/^gitdir:\s*/, '')));
    const commonDir = await realpath(
      path.resolve(adminDir, (await readFile(path.join(adminDir, 'commondir'), 'utf8')).trim()),
    );
    return { kind: 'worktree', dotGit, adminDir, commonDir };
  } catch (err) {
    throw new ToolRefusedError(
      `the worktree's .git file does not point at a usable git dir (${(err as Error).message})`,
      'sandbox',
    );
  }
}
