// The content step of a checkpoint (content.ts commitTouchedPaths): the commit via fast-import, the
// index updated on a private copy while fast-import runs and renamed into place, the row's hashes
// from the bytes committed. Real git, real files: the commit, the index and the worktree agree;
// no loose object and no index copy is left; the filter/end-of-line case falls back to the index
// in place; and the real index never names an object that is not there (gc and repack succeed
// while checkpoints are written).
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { chmod, readdir, rm, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { test } from 'node:test';
import { commitTouchedPaths, type ContentCommit } from '../worker/checkpoints/content.ts';
import { storesBytesAsIs } from '../worker/checkpoints/git/conversion.ts';
import { git, makeRepo } from './support/git.ts';
import { gcAndRepackLoop } from './support/git-maintenance.ts';

const sha256 = (s: string | Buffer) => createHash('sha256').update(s).digest('hex');

async function worktreeOf(repo: string, name: string): Promise<{ worktree: string; branch: string; head: string }> {
  const worktree = `${repo}-wt-${name}`;
  const branch = `run-${name}`;
  await git(repo, 'worktree', 'add', '-q', '-b', branch, worktree, 'main');
  return { worktree, branch, head: await git(worktree, 'rev-parse', 'HEAD') };
}

async function assertConsistent(worktree: string, c: ContentCommit, branch: string): Promise<void> {
  const { commitOid, treeOid } = c;
  assert.equal((await c.indexNow()).inStep, true, 'the index was brought in step');
  assert.equal(await git(worktree, 'rev-parse', `refs/heads/${branch}`), commitOid, 'the branch is at the commit');
  assert.equal(await git(worktree, 'rev-parse', `${commitOid}^{tree}`), treeOid, "the returned tree is the commit's");
  assert.equal(await git(worktree, 'write-tree'), treeOid, "the index holds the commit's tree");
  assert.equal(
    await git(worktree, 'status', '--porcelain', '--untracked-files=all'),
    '',
    'the worktree is clean against index and commit',
  );
  const gitDir = await git(worktree, 'rev-parse', '--absolute-git-dir');
  const left = (await readdir(gitDir)).filter((n) => n.startsWith('echodo-index-') || n === 'index.lock');
  assert.deepEqual(left, [], 'no index copy or lock is left behind');
}

test('modified, new, executable, symlinked and deleted paths: one commit, the index in step, hashes of the bytes committed, nothing loose', async () => {
  const repo = await makeRepo({ 'src/a.ts': 'a\n', 'src/b.ts': 'b\n', 'docs/c.md': 'c\n' });
  const { worktree, branch, head } = await worktreeOf(repo, 'plain');
  const looseBefore = Number(/^count: (\d+)/m.exec(await git(repo, 'count-objects', '-v'))![1]);
  await writeFile(path.join(worktree, 'src/a.ts'), 'a2\n');
  await writeFile(path.join(worktree, 'src/new.ts'), 'new\n');
  await writeFile(path.join(worktree, 'run.sh'), '#!/bin/sh\n');
  await chmod(path.join(worktree, 'run.sh'), 0o755);
  await symlink('src/a.ts', path.join(worktree, 'link'));
  await rm(path.join(worktree, 'docs/c.md'));
  const paths = ['docs/c.md', 'link', 'run.sh', 'src/a.ts', 'src/new.ts'];
  const c = await commitTouchedPaths({ worktree, branch, parentOid: head, paths, message: 'checkpoint 1' });
  await assertConsistent(worktree, c, branch);
  assert.equal(await git(worktree, 'rev-parse', `${c.commitOid}^`), head, 'the parent is the given one');
  assert.deepEqual(
    (await git(worktree, 'ls-tree', '-r', c.commitOid)).split('\n').map((l) =>
      l
        .split(/\s+/)
        .filter((_, i) => i !== 2)
        .join(' '),
    ),
    [
      '120000 blob link',
      '100755 blob run.sh',
      '100644 blob src/a.ts',
      '100644 blob src/b.ts',
      '100644 blob src/new.ts',
    ],
    'modes and paths as on disk; the deletion committed',
  );
  assert.deepEqual(c.files, [
    { path: 'docs/c.md', sha256: null, bytes: 0, deleted: true },
    { path: 'link', sha256: null, bytes: 0, deleted: true }, // not a regular file: not in the manifest, as describeFiles says
    { path: 'run.sh', sha256: sha256('#!/bin/sh\n'), bytes: 10, deleted: false },
    { path: 'src/a.ts', sha256: sha256('a2\n'), bytes: 3, deleted: false },
    { path: 'src/new.ts', sha256: sha256('new\n'), bytes: 4, deleted: false },
  ]);
  const looseAfter = Number(/^count: (\d+)/m.exec(await git(repo, 'count-objects', '-v'))![1]);
  assert.equal(looseAfter, looseBefore, 'no loose object written');

  // A second checkpoint on top, and one with nothing touched.
  await writeFile(path.join(worktree, 'src/b.ts'), 'b2\n');
  const c2 = await commitTouchedPaths({
    worktree,
    branch,
    parentOid: c.commitOid,
    paths: ['src/b.ts'],
    message: 'checkpoint 2',
  });
  await assertConsistent(worktree, c2, branch);
  const c3 = await commitTouchedPaths({
    worktree,
    branch,
    parentOid: c2.commitOid,
    paths: [],
    message: 'checkpoint 3',
  });
  await assertConsistent(worktree, c3, branch);
  assert.equal(c3.treeOid, c2.treeOid);
});

test('end-of-line conversion: git stores LF for a CRLF file, the commit is redone from the index and everything agrees', async () => {
  const repo = await makeRepo({ '.gitattributes': '*.txt text eol=lf\n', 'notes.txt': 'one\n' });
  const { worktree, branch, head } = await worktreeOf(repo, 'eol');
  const crlf = 'one\r\ntwo\r\n';
  await writeFile(path.join(worktree, 'notes.txt'), crlf);
  await writeFile(path.join(worktree, 'plain.ts'), 'x\n');
  const c = await commitTouchedPaths({
    worktree,
    branch,
    parentOid: head,
    paths: ['notes.txt', 'plain.ts'],
    message: 'checkpoint eol',
  });
  await assertConsistent(worktree, c, branch);
  assert.equal(
    await git(worktree, 'cat-file', 'blob', `${c.commitOid}:notes.txt`),
    'one\ntwo',
    'the committed blob is the converted text',
  );
  assert.equal(await git(worktree, 'rev-parse', `${c.commitOid}^`), head);
  assert.equal(
    c.files.find((f) => f.path === 'notes.txt')!.sha256,
    sha256(crlf),
    'the row hashes the file as it is on disk',
  );
  await git(repo, 'fsck', '--no-progress', '--no-dangling'); // throws on a broken object or link
});

test(
  'git gc --prune=now and git repack -ad running all along: every checkpoint lands, the index never names a missing object',
  { timeout: 240_000 },
  async () => {
    const files: Record<string, string> = {};
    for (let i = 0; i < 40; i++) files[`src/m-${i}.ts`] = `export const m = ${i};\n`;
    const repo = await makeRepo(files);
    const { worktree, branch } = await worktreeOf(repo, 'gc');
    let head = await git(worktree, 'rev-parse', 'HEAD');
    // Each pass throws (failing the test) if git finds an object named by an index or ref missing.
    const maintenance = gcAndRepackLoop(repo);
    try {
      for (let seq = 1; seq <= 30 || maintenance.counts.repack < 3; seq++) {
        const paths = [`src/m-${seq % 40}.ts`, `src/n-${seq}.ts`];
        for (const p of paths) await writeFile(path.join(worktree, p), `export const v = ${seq}; // ${p}\n`);
        const c = await commitTouchedPaths({ worktree, branch, parentOid: head, paths, message: `checkpoint ${seq}` });
        assert.equal(await git(worktree, 'rev-parse', `refs/heads/${branch}`), c.commitOid);
        assert.equal((await c.indexNow()).inStep, true); // as the writer does after the row
        head = c.commitOid;
      }
    } finally {
      await maintenance.stop();
    }
    const { gc, repack } = maintenance.counts;
    assert.ok(gc >= 3 && repack >= 3, `maintenance ran several times (${JSON.stringify(maintenance.counts)})`);
    await git(repo, 'fsck', '--connectivity-only', '--no-progress');
    await git(worktree, 'diff-index', '--cached', '--quiet', 'HEAD'); // index == tip tree (throws otherwise)
    assert.equal(await git(worktree, 'status', '--porcelain'), '');
  },
);

test('git stores the bytes as they are unless attributes or config say otherwise (conversion.ts)', async () => {
  const repo = await makeRepo({
    '.gitattributes':
      '*.txt text\n*.bin -text eol=crlf\n*.id ident\n*.enc working-tree-encoding=UTF-16\n*.old -crlf\n*.le eol=lf\n',
    'a.ts': 'a\n',
  });
  const asIs = (paths: string[]) => storesBytesAsIs(repo, paths);
  assert.equal(
    await asIs(['a.ts', 'b/c.ts', 'x.bin', 'y.old']),
    true,
    'no attribute, -text (whatever eol says), -crlf',
  );
  for (const p of ['n.txt', 'n.id', 'n.enc', 'n.le'])
    assert.equal(await asIs(['a.ts', p]), false, `${p} may be stored converted`);
  assert.equal(await asIs([]), true);
  await git(repo, 'config', 'core.autocrlf', 'input');
  assert.equal(await asIs(['a.ts']), false, 'core.autocrlf=input converts files without attributes');
  assert.equal(await asIs(['x.bin']), true, '-text is binary even with core.autocrlf');
  await git(repo, 'config', 'core.autocrlf', 'false');
  await git(repo, 'config', 'core.filemode', 'false');
  assert.equal(await asIs(['a.ts']), false, "core.filemode=false keeps the index's mode, not the file's");
  await git(repo, 'config', 'core.filemode', 'true');
  assert.equal(await asIs(['a.ts']), true);
});
