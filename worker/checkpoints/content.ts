// Step 1 of a checkpoint: commit the worktree's changes on the run's branch. Only the touched
// paths are staged (git update-index), the tree is written from the index (whose cache-tree
// makes unchanged subtrees free), and the branch moves by compare-and-set. No scan of the tree.
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, existsSync } from 'node:fs';
import { lstat, mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { deflateSync } from 'node:zlib';
import { runGit } from '../git.ts';
import { commonDirOf } from './notes.ts';
import type { FileTouched } from './hash.ts';
import { redactString } from './redact.ts';

export async function commitTouchedPaths(args: {
  worktree: string;
  branch: string;
  parentOid: string;
  paths: string[];
  message: string;
}): Promise<{ commitOid: string; treeOid: string }> {
  if (args.paths.length) {
    await runGit(args.worktree, ['update-index', '--add', '--remove', '-z', '--stdin'], { input: args.paths.join('\0') });
  }
  const tree = (await runGit(args.worktree, ['write-tree'])).stdout.trim();
  const objectsDir = path.join(await commonDirOf(args.worktree), 'objects');
  const message = redactString(args.message); // a commit message is persisted: the one redactor
  // The staged blobs and the tree are referenced by the worktree's index (git gc keeps them);
  // the commit object is referenced by nothing until the branch moves, so a `git gc --prune=now`
  // running at that instant may delete it: update-ref then refuses the missing object, and the
  // commit is written again.
  for (let attempt = 1; ; attempt++) {
    const commit =
      tree.length === 40 && args.parentOid.length === 40
        ? await writeCommitObject(objectsDir, tree, args.parentOid, message)
        : (await runGit(args.worktree, ['commit-tree', tree, '-p', args.parentOid, '-m', message])).stdout.trim();
    try {
      // Compare-and-set: fails if anything else moved the branch since our last checkpoint.
      await runGit(args.worktree, ['update-ref', `refs/heads/${args.branch}`, commit, args.parentOid]);
      return { commitOid: commit, treeOid: tree };
    } catch (err) {
      const present = await runGit(args.worktree, ['cat-file', '-e', `${commit}^{commit}`], { allowExitCodes: [1, 128] });
      if (present.exitCode === 0 || attempt >= 3) throw err;
    }
  }
}

/**
 * A commit object written straight into the object store (what `git commit-tree` does, without
 * spawning it): zlib-deflated `commit <size>\0<body>`, named by its SHA-1, written to a temp file
 * and renamed into place. SHA-1 repositories only; callers fall back to git otherwise.
 */
async function writeCommitObject(objectsDir: string, tree: string, parent: string, message: string): Promise<string> {
  const ident = `echodo-worker <echodo-worker@localhost> ${Math.floor(Date.now() / 1000)} +0000`;
  const body = Buffer.from(`tree ${tree}\nparent ${parent}\nauthor ${ident}\ncommitter ${ident}\n\n${message}\n`);
  const raw = Buffer.concat([Buffer.from(`commit ${body.length}\0`), body]);
  const oid = createHash('sha1').update(raw).digest('hex');
  const dir = path.join(objectsDir, oid.slice(0, 2));
  const file = path.join(dir, oid.slice(2));
  if (existsSync(file)) return oid;
  const deflated = deflateSync(raw);
  // `git prune-packed` (ours, or a concurrent `git gc`) removes empty fan-out directories: one
  // may vanish between our mkdir and our write, so both are tried again (as git itself does).
  for (let attempt = 1; ; attempt++) {
    const temp = path.join(dir, `tmp_obj_echodo_${process.pid}_${randomBytes(4).toString('hex')}`);
    try {
      await mkdir(dir, { recursive: true });
      await writeFile(temp, deflated, { mode: 0o444 });
      await rename(temp, file);
      return oid;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT' || attempt >= 5) throw err;
    }
  }
}

/** sha256 of a file: one read for the usual small file, a stream for a large one. */
export async function sha256File(file: string, size?: number): Promise<string> {
  const hash = createHash('sha256');
  if (size !== undefined && size <= 1024 * 1024) return hash.update(await readFile(file)).digest('hex');
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
      return { path: rel, sha256: await sha256File(abs, st.size), bytes: st.size, deleted: false };
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
