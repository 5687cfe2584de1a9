// The index side of a checkpoint (content.ts): the worktree's index brought in step with the
// checkpoint commit. On a private, hard-linked copy while fast-import writes the commit
// (stageOnCopy), installed by rename once the commit's pack is in place, so the real index never
// names an object that is not there yet; or, when the copy cannot be used, the ordinary way in
// place (updateIndexInPlace).
import { randomBytes } from 'node:crypto';
import { closeSync, linkSync, mkdirSync, openSync, renameSync, statSync, unlinkSync } from 'node:fs';
import { readdir, readFile, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import { runGit } from '../../git/run-git.ts';

/** A worktree's own git dir (where its index lives), from its .git file or folder; cached. */
const gitDirs = new Map<string, string>();
async function gitDirOf(worktree: string): Promise<string> {
  let dir = gitDirs.get(worktree);
  if (!dir) {
    const dotGit = path.join(worktree, '.git');
    const st = await stat(dotGit);
    dir = st.isDirectory()
      ? dotGit
      : path.resolve(worktree, (await readFile(dotGit, 'utf8')).trim().replace(/^gitdir:\s*/, ''));
    gitDirs.set(worktree, dir);
  }
  return dir;
}

/** Index copies and scratch object folders left by a killed worker: removed once per git dir and process. */
const swept = new Set<string>();
async function sweepIndexCopies(gitDir: string): Promise<void> {
  if (swept.has(gitDir)) return;
  swept.add(gitDir);
  for (const name of await readdir(gitDir).catch(() => [] as string[])) {
    if (!name.startsWith('echodo-index-') && !name.startsWith('echodo-scratch-')) continue;
    const file = path.join(gitDir, name);
    const st = await stat(file).catch(() => undefined);
    if (st && Date.now() - st.mtimeMs > 60_000) await rm(file, { recursive: true, force: true }).catch(() => {});
  }
}

/**
 * The index side of the checkpoint, run while fast-import writes the commit, without waiting for
 * it: update-index --info-only on a hard-linked copy of the index (no object written, the real
 * index untouched), then write-tree on the copy with a scratch object folder in front of the
 * repository's (the trees it writes go there and are thrown away: fast-import writes the same
 * ones; --missing-ok, since the new blobs are still being imported). Its tree is compared with
 * the commit's; `install` then renames the copy over the index under index.lock, which the
 * caller does only once the commit's pack is in place, so the index never names an object that
 * is not there. `install` answers false when the copy was dropped (a different tree: filters or
 * end-of-line conversion; an index changed meanwhile; a held lock): the caller then updates the
 * real index the ordinary way.
 */
export interface Staged {
  install: (treeOid: string) => Promise<boolean>;
  drop: () => Promise<void>;
}

export async function stageOnCopy(worktree: string, commonDir: string, paths: string[]): Promise<Staged | undefined> {
  const gitDir = await gitDirOf(worktree);
  await sweepIndexCopies(gitDir);
  // The file operations here are single syscalls on small metadata: done synchronously, without
  // a round trip through the thread pool each (several ms apiece on a loaded machine).
  const index = path.join(gitDir, 'index');
  const before = statSync(index, { throwIfNoEntry: false });
  if (!before) return undefined;
  const id = `${process.pid}-${randomBytes(4).toString('hex')}`;
  const copy = path.join(gitDir, `echodo-index-${id}`);
  const scratch = path.join(gitDir, `echodo-scratch-${id}`);
  linkSync(index, copy);
  const drop = async () => {
    try {
      unlinkSync(copy);
    } catch {
      /* already gone */
    }
  };
  let tree: string;
  try {
    const env = { GIT_INDEX_FILE: copy };
    await runGit(worktree, ['update-index', '--add', '--remove', '--info-only', '-z', '--stdin'], {
      input: paths.join('\0'),
      env,
    });
    mkdirSync(scratch);
    const objects = {
      ...env,
      GIT_OBJECT_DIRECTORY: scratch,
      GIT_ALTERNATE_OBJECT_DIRECTORIES: path.join(commonDir, 'objects'),
    };
    tree = (await runGit(worktree, ['write-tree', '--missing-ok'], { env: objects })).stdout.trim();
  } catch (err) {
    await drop();
    throw err;
  } finally {
    rm(scratch, { recursive: true, force: true }).catch(() => {});
  }
  const install = async (treeOid: string): Promise<boolean> => {
    if (tree !== treeOid) {
      await drop();
      return false;
    }
    const lock = `${index}.lock`;
    let held: number;
    try {
      held = openSync(lock, 'wx');
    } catch {
      await drop();
      return false;
    }
    try {
      // git replaces the index by rename: the same inode, size and mtime mean nobody wrote it meanwhile.
      const now = statSync(index, { throwIfNoEntry: false });
      if (!now || now.ino !== before.ino || now.size !== before.size || now.mtimeMs !== before.mtimeMs) {
        await drop();
        return false;
      }
      renameSync(copy, index);
      return true;
    } finally {
      closeSync(held);
      try {
        unlinkSync(lock);
      } catch {
        /* nothing to remove */
      }
    }
  };
  return { install, drop };
}

/** The ordinary way, in place (the commit's pack is there, so update-index finds its blobs): the index's tree. */
export async function updateIndexInPlace(worktree: string, paths: string[]): Promise<string> {
  await runGit(worktree, ['update-index', '--add', '--remove', '-z', '--stdin'], { input: paths.join('\0') });
  return (await runGit(worktree, ['write-tree'])).stdout.trim();
}
