// Step 1 of a checkpoint: commit the worktree's changes on the run's branch. Only the touched
// paths are staged (git update-index), the tree is written from the index (whose cache-tree
// makes unchanged subtrees free), and the branch moves by compare-and-set. No scan of the tree.
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { lstat } from 'node:fs/promises';
import path from 'node:path';
import { runGit } from '../git.ts';
import type { FileTouched } from './hash.ts';

export async function commitTouchedPaths(args: {
  worktree: string;
  branch: string;
  parentOid: string;
  paths: string[];
  message: string;
}): Promise<string> {
  let tree = `${args.parentOid}^{tree}`;
  if (args.paths.length) {
    await runGit(args.worktree, ['update-index', '--add', '--remove', '-z', '--stdin'], { input: args.paths.join('\0') });
    tree = (await runGit(args.worktree, ['write-tree'])).stdout.trim();
  }
  const commit = (await runGit(args.worktree, ['commit-tree', tree, '-p', args.parentOid, '-m', args.message])).stdout.trim();
  // Compare-and-set: fails if anything else moved the branch since our last checkpoint.
  await runGit(args.worktree, ['update-ref', `refs/heads/${args.branch}`, commit, args.parentOid]);
  return commit;
}

export async function sha256File(file: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

/** Path + sha256 + size of each touched path as it is on disk now (deleted when gone). */
export async function describeFiles(root: string, paths: string[]): Promise<FileTouched[]> {
  return Promise.all(
    paths.map(async (rel): Promise<FileTouched> => {
      const abs = path.join(root, rel);
      const st = await lstat(abs).catch(() => undefined);
      if (!st || !st.isFile()) return { path: rel, sha256: null, bytes: 0, deleted: true };
      return { path: rel, sha256: await sha256File(abs), bytes: st.size, deleted: false };
    }),
  );
}

/** Paths git sees as changed or untracked (respecting .gitignore): the cross-check after commands. */
export async function changedPathsByGit(worktree: string): Promise<string[]> {
  const out = (await runGit(worktree, ['status', '--porcelain=v1', '-z', '--untracked-files=all', '--no-renames'])).stdout;
  return out
    .split('\0')
    .filter(Boolean)
    .map((entry) => entry.slice(3));
}
