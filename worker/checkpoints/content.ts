// Step 1 of a checkpoint: commit the worktree's changes on the run's branch, in a pack.
// The touched paths are read once (their sha256 for the row comes from the same bytes) and go
// through one `git fast-import` (blobs, trees and the commit in one pack, kept by a .keep file
// until the branch ref points at the commit: a concurrent `git gc --prune=now` or `git repack
// -ad` can never see them unreferenced, and nothing is written loose). fast-import refuses to
// move the branch unless its tip is the parent (a compare-and-set).
// The worktree's index is brought to the same state on a private copy, renamed over the index
// once the commit's pack is in place (git/index-copy.ts): the real index never names an object that
// is not there yet (a concurrent gc or repack would fail on it).
// When git stores the touched files as their bytes (git/conversion.ts, asked beside fast-import),
// fast-import's commit is the one git would make, and the index work is left to the caller
// (`indexNow`, after the row: off the round's path). Otherwise it runs beside fast-import, and
// if the copy's tree is not the commit's (end-of-line conversion changed what git stores), it is
// dropped, the index is updated in place as git would, and the commit is redone from the index.
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, readFileSync, unlinkSync } from 'node:fs';
import { mkdir, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { deflateSync } from 'node:zlib';
import { GitError, runGit, type GitResult } from '../git/run-git.ts';
import { fastImport } from './git/fast-import.ts';
import { setTimeout as sleep } from 'node:timers/promises';
import { commonDirOf } from './notes.ts';
import { stageOnCopy, updateIndexInPlace, type Staged } from './git/index-copy.ts';
import { storesBytesAsIs } from './git/conversion.ts';
import type { FileTouched } from '../../core/checkpoint-hash.ts';
import { redactString } from '../../core/redact.ts';
import { EchodoError } from '../../core/errors.ts';
import { withTree } from '../tree/registry.ts';

const IDENT = 'echodo-worker <echodo-worker@localhost>';

/** A path as fast-import reads it: C-style quoted when it could be misread. */
function fiPath(p: string): string {
  return /^"|[\n\\"]/.test(p) ? JSON.stringify(p) : p;
}

/** A touched path as read for a checkpoint: what fast-import stores and what the row records. */
interface TouchedFile {
  rel: string;
  /** 'D': gone (or not a file git tracks); 'skip': a directory, its files are reported one by one. */
  mode: '100644' | '100755' | '120000' | 'D' | 'skip';
  data?: Buffer;
  /** sha256 of a regular file's bytes (the row's); null otherwise. */
  sha256: string | null;
}

/**
 * Reads every touched path once, in the tree process: mode, bytes and sha256 (describeFiles' answer
 * comes from the same bytes). A path reached through a symlinked folder is not in the tree: gone.
 * A folder (a nested repository included) is never recorded itself: its files are, one by one.
 */
async function readTouched(worktree: string, paths: string[]): Promise<TouchedFile[]> {
  const facts = await withTree(worktree, (tree) => tree.files(paths, true));
  return facts.map((f, i): TouchedFile => {
    const rel = paths[i]!;
    assertRecordable(rel);
    if (f.kind === 'symlink') return { rel, mode: '120000', data: f.target ?? Buffer.alloc(0), sha256: null };
    if (f.kind === 'dir' || f.kind === 'repo') return { rel, mode: 'skip', sha256: null };
    if (f.kind !== 'file' || !f.data || !f.sha256) return { rel, mode: 'D', sha256: null };
    return { rel, mode: f.exec ? '100755' : '100644', data: f.data, sha256: f.sha256 };
  });
}

/**
 * A name that did not survive decoding (invalid UTF-8 arrives as U+FFFD) would be recorded under
 * another name than the file's: the round fails naming it rather than record a lie.
 */
function assertRecordable(rel: string): void {
  if (rel.includes('\uFFFD')) {
    throw new EchodoError(
      'unsupported_path',
      `file name ${JSON.stringify(rel)} is not valid UTF-8 (shown with U+FFFD); rename it to checkpoint it`,
    );
  }
}

/** What the row records of the files read (describeFiles' shape: anything not a regular file is deleted). */
function describeTouched(files: TouchedFile[]): FileTouched[] {
  return files.map((f) =>
    f.sha256 !== null
      ? { path: f.rel, sha256: f.sha256, bytes: f.data!.length, deleted: false }
      : { path: f.rel, sha256: null, bytes: 0, deleted: true },
  );
}

/** The fast-import stream of one checkpoint commit: changed files inline, deletions, then `ls` of the root. */
function checkpointStream(
  files: TouchedFile[],
  branch: string,
  parentOid: string,
  message: string,
  when: number,
): Buffer {
  const parts: Buffer[] = [];
  const text = (t: string) => parts.push(Buffer.from(t));
  const msg = Buffer.from(`${message}\n`);
  text(`commit refs/heads/${branch}\nmark :1\ncommitter ${IDENT} ${when} +0000\ndata ${msg.length}\n`);
  parts.push(msg);
  text(`from ${parentOid}\n`);
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

/** The commit and its root tree, via fast-import (retried when a concurrent gc deleted its temporary pack). */
async function importCommit(
  worktree: string,
  commonDir: string,
  files: TouchedFile[],
  branch: string,
  parentOid: string,
  message: string,
): Promise<{ commitOid: string; treeOid: string }> {
  const marks = path.join(commonDir, `echodo-marks-${process.pid}-${randomBytes(4).toString('hex')}`);
  try {
    let out: GitResult;
    for (let attempt = 1; ; attempt++) {
      try {
        // A retry is stamped a second after the failed attempt (git/fast-import.ts).
        out = await fastImport(worktree, (stamp) => checkpointStream(files, branch, parentOid, message, stamp), [
          `--export-marks=${marks}`,
        ]);
        break;
      } catch (err) {
        // `git gc --prune=now` deletes every tmp_pack_* file it finds, a pack being written
        // included: fast-import then fails before it moves any ref, and is simply run again.
        if (!(err instanceof GitError) || attempt >= 5) throw err;
        await sleep(attempt * 10);
      }
    }
    const commitOid = readFileSync(marks, 'utf8').split('\n')[0]!.split(' ')[1]!;
    const treeOid = out.stdout
      .split('\n')
      .find((l) => l.startsWith('040000 tree '))!
      .slice('040000 tree '.length, '040000 tree '.length + 40);
    return { commitOid, treeOid };
  } finally {
    try {
      unlinkSync(marks);
    } catch {
      /* never written: fast-import failed */
    }
  }
}

/** What a checkpoint's content step made. */
export interface ContentCommit {
  commitOid: string;
  treeOid: string;
  files: FileTouched[];
  /**
   * Brings the worktree's index in step with the commit: done already, or (when git stores the
   * files as their bytes) done by this call, which the writer makes once the row is in, so the
   * index work never competes with the row for the CPU. Called once. `inStep: false` when the
   * index had to be updated the ordinary way and its tree is not the commit's.
   */
  indexNow: () => Promise<{ inStep: boolean; paths: string[] }>;
}

export async function commitTouchedPaths(args: {
  worktree: string;
  branch: string;
  parentOid: string;
  paths: string[];
  message: string;
}): Promise<ContentCommit> {
  const commonDir = await commonDirOf(args.worktree);
  const message = redactString(args.message); // a commit message is persisted: the one redactor
  const touched = await readTouched(args.worktree, args.paths);
  const files = describeTouched(touched);
  // A folder is never staged by its own name: git would record a nested repository as a gitlink.
  const folders = new Set(touched.filter((f) => f.mode === 'skip').map((f) => f.rel));
  if (folders.size) args = { ...args, paths: args.paths.filter((p) => !folders.has(p)) };
  const alreadyInStep = () => Promise.resolve({ inStep: true, paths: args.paths });
  if (!args.paths.length) {
    const { commitOid, treeOid } = await importCommit(
      args.worktree,
      commonDir,
      touched,
      args.branch,
      args.parentOid,
      message,
    );
    return { commitOid, treeOid, files, indexNow: alreadyInStep };
  }
  // Beside fast-import: whether git stores these files as their bytes. If it may not, the index
  // copy is started as soon as that is known (it decides whether the commit must be redone).
  const asIs = storesBytesAsIs(args.worktree, args.paths).catch(() => false);
  let staging: Promise<Staged | undefined> | undefined;
  const stage = () => (staging ??= stageOnCopy(args.worktree, commonDir, args.paths).catch(() => undefined));
  void asIs.then((yes) => {
    if (!yes) void stage();
  });
  let commitOid: string;
  let treeOid: string;
  try {
    ({ commitOid, treeOid } = await importCommit(
      args.worktree,
      commonDir,
      touched,
      args.branch,
      args.parentOid,
      message,
    ));
  } catch (err) {
    if (!(await asIs)) await (await stage())?.drop();
    throw err;
  }
  if (await asIs) {
    // The commit is what git would make of these files: the index follows off the round's path.
    const indexNow = async () => {
      const staged = await stage();
      if (staged && (await staged.install(treeOid).catch(() => false))) return { inStep: true, paths: args.paths };
      const tree = await updateIndexInPlace(args.worktree, args.paths);
      return { inStep: tree === treeOid, paths: args.paths };
    };
    return { commitOid, treeOid, files, indexNow };
  }
  const staged = await stage();
  if (staged && (await staged.install(treeOid).catch(() => false)))
    return { commitOid, treeOid, files, indexNow: alreadyInStep };
  const indexTree = await updateIndexInPlace(args.worktree, args.paths);
  if (indexTree === treeOid) return { commitOid, treeOid, files, indexNow: alreadyInStep };
  // git stores something other than the bytes on disk here (filters, eol): the index is right.
  const redone =
    indexTree.length === 40 && args.parentOid.length === 40
      ? await writeCommitObject(path.join(commonDir, 'objects'), indexTree, args.parentOid, message)
      : (await runGit(args.worktree, ['commit-tree', indexTree, '-p', args.parentOid, '-m', message])).stdout.trim();
  await runGit(args.worktree, ['update-ref', `refs/heads/${args.branch}`, redone, commitOid]);
  return { commitOid: redone, treeOid: indexTree, files, indexNow: alreadyInStep };
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

/** Path + sha256 + size of each touched path as it is in the tree now (deleted when gone), read by the tree process. */
export async function describeFiles(root: string, paths: string[]): Promise<FileTouched[]> {
  const facts = await withTree(root, (tree) => tree.files(paths, false));
  return facts.map((f, i): FileTouched => {
    const rel = paths[i]!;
    if (f.kind !== 'file' || !f.sha256) return { path: rel, sha256: null, bytes: 0, deleted: true };
    return { path: rel, sha256: f.sha256, bytes: f.bytes ?? 0, deleted: false };
  });
}

/**
 * Paths git sees as changed or untracked (respecting .gitignore): the cross-check after commands.
 * core.untrackedCache=true: an untracked cache keyed to another path (an aimed spare taken as is,
 * worker/worktrees/spares.ts) is made anew for this one, and the status writes it back with the index.
 */
export async function changedPathsByGit(worktree: string): Promise<string[]> {
  const args = [
    '-c',
    'core.untrackedCache=true',
    'status',
    '--porcelain=v1',
    '-z',
    '--untracked-files=all',
    '--no-renames',
  ];
  const out = (await runGit(worktree, args)).stdout;
  return out
    .split('\0')
    .filter(Boolean)
    .map((entry) => entry.slice(3));
}
