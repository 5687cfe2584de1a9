// Step 1 of a checkpoint: commit the worktree's changes on the run's branch, in a pack.
// The touched paths' contents go through one `git fast-import` (blobs, trees and the commit in
// one pack, kept by a .keep file until the branch ref points at the commit: a concurrent
// `git gc --prune=now` or `git repack -ad` can never see them unreferenced, and nothing is
// written loose). fast-import refuses to move the branch unless its tip is the parent (a
// compare-and-set). Then the worktree's index is brought to the same state: update-index of
// the same paths finds every blob already packed, and write-tree (whose cache-tree makes
// unchanged subtrees free) must give the commit's tree: if it does not (a clean filter or
// end-of-line conversion changed what git stores), the commit is redone from the index.
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, existsSync } from 'node:fs';
import { lstat, mkdir, readFile, readlink, rename, unlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { deflateSync } from 'node:zlib';
import { GitError, runGit, type GitResult } from '../git.ts';
import { setTimeout as sleep } from 'node:timers/promises';
import { commonDirOf } from './notes.ts';
import type { FileTouched } from '../../core/checkpoint-hash.ts';
import { redactString } from '../../core/redact.ts';

const IDENT = 'echodo-worker <echodo-worker@localhost>';

/** A path as fast-import reads it: C-style quoted when it could be misread. */
function fiPath(p: string): string {
  return /^"|[\n\\"]/.test(p) ? JSON.stringify(p) : p;
}

/** The fast-import stream of one checkpoint commit: changed files inline, deletions, then `ls` of the root. */
async function checkpointStream(worktree: string, branch: string, parentOid: string, paths: string[], message: string, when: number): Promise<Buffer> {
  const parts: Buffer[] = [];
  const text = (t: string) => parts.push(Buffer.from(t));
  const msg = Buffer.from(`${message}\n`);
  text(`commit refs/heads/${branch}\nmark :1\ncommitter ${IDENT} ${when} +0000\ndata ${msg.length}\n`);
  parts.push(msg);
  text(`from ${parentOid}\n`);
  const files = await Promise.all(
    paths.map(async (rel) => {
      const abs = path.join(worktree, rel);
      const st = await lstat(abs).catch(() => undefined);
      if (!st) return { rel, mode: 'D' };
      if (st.isSymbolicLink()) return { rel, mode: '120000', data: Buffer.from(await readlink(abs)) };
      if (st.isFile()) return { rel, mode: st.mode & 0o111 ? '100755' : '100644', data: await readFile(abs) };
      return { rel, mode: 'skip' }; // a directory: its files are reported one by one
    }),
  );
  for (const f of files) {
    if (f.mode === 'skip') continue;
    if (f.mode === 'D') {
      text(`D ${fiPath(f.rel)}\n`);
      continue;
    }
    text(`M ${f.mode} inline ${fiPath(f.rel)}\ndata ${f.data!.length}\n`);
    parts.push(f.data!);
    text('\n');
  }
  text('ls ""\n\n');
  return Buffer.concat(parts);
}

export async function commitTouchedPaths(args: {
  worktree: string;
  branch: string;
  parentOid: string;
  paths: string[];
  message: string;
}): Promise<{ commitOid: string; treeOid: string }> {
  const commonDir = await commonDirOf(args.worktree);
  const message = redactString(args.message); // a commit message is persisted: the one redactor
  const marks = path.join(commonDir, `echodo-marks-${process.pid}-${randomBytes(4).toString('hex')}`);
  let commitOid: string;
  let treeOid: string;
  try {
    const now = Math.floor(Date.now() / 1000);
    let out: GitResult;
    for (let attempt = 1; ; attempt++) {
      // Each attempt a second later: a failed one may leave its pack's .keep behind (with no pack),
      // and the same objects again would be the same pack name, which fast-import then refuses.
      const stream = await checkpointStream(args.worktree, args.branch, args.parentOid, args.paths, message, now + attempt - 1);
      try {
        // unpackLimit=1: even a one-object import stays a (kept) pack, never loose objects.
        out = await runGit(args.worktree, ['-c', 'fastimport.unpackLimit=1', 'fast-import', '--quiet', `--export-marks=${marks}`], { input: stream });
        break;
      } catch (err) {
        // `git gc --prune=now` deletes every tmp_pack_* file it finds, a pack being written
        // included: fast-import then fails before it moves any ref, and is simply run again.
        if (!(err instanceof GitError) || attempt >= 5) throw err;
        await sleep(attempt * 10);
      }
    }
    commitOid = (await readFile(marks, 'utf8')).split('\n')[0]!.split(' ')[1]!;
    treeOid = out.stdout.split('\n').find((l) => l.startsWith('040000 tree '))!.slice('040000 tree '.length, '040000 tree '.length + 40);
  } finally {
    await unlink(marks).catch(() => {});
  }
  if (args.paths.length) {
    await runGit(args.worktree, ['update-index', '--add', '--remove', '-z', '--stdin'], { input: args.paths.join('\0') });
  }
  const indexTree = (await runGit(args.worktree, ['write-tree'])).stdout.trim();
  if (indexTree === treeOid) return { commitOid, treeOid };
  // git stores something other than the bytes on disk here (filters, eol): the index is right.
  const redone =
    indexTree.length === 40 && args.parentOid.length === 40
      ? await writeCommitObject(path.join(commonDir, 'objects'), indexTree, args.parentOid, message)
      : (await runGit(args.worktree, ['commit-tree', indexTree, '-p', args.parentOid, '-m', message])).stdout.trim();
  await runGit(args.worktree, ['update-ref', `refs/heads/${args.branch}`, redone, commitOid]);
  return { commitOid: redone, treeOid: indexTree };
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
