// Git objects read in-process (worker/git/objects.ts) against git's own answers: every object of
// a repository with loose objects and packs whose deltas name their base by offset and by id;
// refs loose, packed and symbolic; a corrupt object refused; and the verification's note lookup
// (worker/checkpoints/note-lookup.ts) reading in-process exactly what git reads, at every fanout.
import assert from 'node:assert/strict';
import { chmodSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { test } from 'node:test';
import { deflateSync, inflateSync } from 'node:zlib';
import { ObjectReader } from '../worker/git/objects.ts';
import { lookupNotes, readNotesInProcess } from '../worker/checkpoints/note-lookup.ts';
import { writeCheckpointNotes, type CheckpointNote } from '../worker/checkpoints/notes.ts';
import { commonDirOnDisk, runGit } from '../worker/git/run-git.ts';
import { git, makeRepo } from './support/git.ts';

/** A repository with 40 commits of slowly changing files: a repack deltifies its trees and blobs. */
async function historyRepo(): Promise<string> {
  const files: Record<string, string> = {};
  for (let i = 0; i < 20; i++) files[`src/d${i % 4}/f${i}.txt`] = `line\n`.repeat(200) + `file ${i}\n`;
  const repo = await makeRepo(files);
  for (let c = 1; c <= 40; c++) {
    await writeFile(
      path.join(repo, `src/d${c % 4}/f${c % 20}.txt`),
      `line\n`.repeat(200) + `file ${c % 20} version ${c}\n`,
    );
    await git(repo, 'commit', '-q', '-am', `change ${c}`);
  }
  return repo;
}

/** Every object id in the repository with its type, as git lists them. */
async function allObjects(repo: string): Promise<Map<string, string>> {
  const out = await git(repo, 'cat-file', '--batch-all-objects', '--batch-check=%(objectname) %(objecttype)');
  return new Map(out.split('\n').map((line) => line.split(' ') as [string, string]));
}

/** Delta entries in the repository's packs, as `git verify-pack -v` reports them. */
async function deltaCount(repo: string): Promise<number> {
  const packs = (await git(repo, 'count-objects', '-v')).match(/^packs: (\d+)/m)![1];
  if (packs === '0') return 0;
  const idx = (await git(repo, 'rev-parse', '--git-path', 'objects/pack')).trim();
  const listing = await git(repo, 'verify-pack', '-v', ...readdirIdx(path.resolve(repo, idx)));
  return listing.split('\n').filter((l) => /^[0-9a-f]{40} \w+ +\d+ \d+ \d+ \d+ [0-9a-f]{40}$/.test(l)).length;
}

function readdirIdx(dir: string): string[] {
  return readdirSync(dir)
    .filter((n) => n.endsWith('.idx'))
    .sort()
    .map((n) => path.join(dir, n));
}

async function assertReadsEveryObject(repo: string): Promise<number> {
  const objects = await allObjects(repo);
  const reader = ObjectReader.open(path.join(repo, '.git'))!;
  try {
    for (const [oid, type] of objects) {
      const object = reader.read(oid);
      assert.ok(object, `object ${oid} (${type}) read`);
      assert.equal(object.type, type, `type of ${oid}`);
    }
    // Bodies compared byte for byte with git's for a sample of each type.
    for (const [oid, type] of [...objects].filter((_, i) => i % 7 === 0)) {
      const expected = await git(repo, 'cat-file', type, oid).catch(() => undefined);
      if (type !== 'tree' && expected !== undefined)
        assert.equal(reader.read(oid)!.body.toString('utf8').replace(/\n$/, ''), expected, `body of ${oid}`);
    }
  } finally {
    reader.close();
  }
  return objects.size;
}

test('every object reads as git stores it: loose, then packed with offset deltas, then with ref deltas', async () => {
  const repo = await historyRepo();
  assert.equal(await deltaCount(repo), 0);
  const loose = await assertReadsEveryObject(repo);
  assert.ok(loose > 100, `${loose} loose objects`);

  await git(repo, 'repack', '-adq', '--depth=50', '--window=50');
  assert.ok((await deltaCount(repo)) > 20, 'the repack made offset deltas');
  assert.equal(await assertReadsEveryObject(repo), loose);

  // Deltas that name their base by object id (what `repack.useDeltaBaseOffset=false` and thin
  // packs fixed by index-pack write).
  await git(repo, '-c', 'repack.useDeltaBaseOffset=false', 'repack', '-adfq', '--depth=50', '--window=50');
  const pack = readdirIdx(path.join(repo, '.git/objects/pack'))[0]!.replace(/\.idx$/, '.pack');
  const verify = await git(repo, 'verify-pack', '-v', pack);
  assert.ok(/ [0-9a-f]{40}$/m.test(verify), 'the pack has deltas');
  assert.equal(await assertReadsEveryObject(repo), loose);
});

test('an object whose bytes do not match its id is refused, and a missing one is not found', async () => {
  const repo = await makeRepo({ 'a.txt': 'hello\n' });
  const blob = await git(repo, 'rev-parse', 'HEAD:a.txt');
  const file = path.join(repo, '.git/objects', blob.slice(0, 2), blob.slice(2));
  const raw = inflateSync(readFileSync(file));
  chmodSync(file, 0o644);
  writeFileSync(file, deflateSync(Buffer.from(raw.toString('latin1').replace('hello', 'jello'), 'latin1')));
  const reader = ObjectReader.open(path.join(repo, '.git'))!;
  try {
    assert.equal(reader.read(blob), undefined);
    assert.equal(reader.read('0'.repeat(40)), undefined);
    assert.equal(reader.read('not an oid'), undefined);
    assert.equal(reader.read(await git(repo, 'rev-parse', 'HEAD'))?.type, 'commit');
  } finally {
    reader.close();
  }
});

test('refs resolve loose, packed and symbolic, as git resolves them', async () => {
  const repo = await makeRepo({ 'a.txt': 'a\n' });
  const head = await git(repo, 'rev-parse', 'HEAD');
  await git(repo, 'update-ref', 'refs/notes/loose', head);
  await git(repo, 'update-ref', 'refs/notes/packed', head);
  await git(repo, 'pack-refs', '--all');
  await git(repo, 'symbolic-ref', 'refs/notes/alias', 'refs/notes/packed');
  await git(repo, 'commit', '-q', '--allow-empty', '-m', 'second');
  const second = await git(repo, 'rev-parse', 'HEAD');
  await git(repo, 'update-ref', 'refs/notes/loose', second); // a loose ref over its packed line wins
  const reader = ObjectReader.open(path.join(repo, '.git'))!;
  try {
    assert.equal(reader.resolveRef('refs/notes/loose'), second);
    assert.equal(reader.resolveRef('refs/notes/packed'), head);
    assert.equal(reader.resolveRef('refs/notes/alias'), head);
    assert.equal(reader.resolveRef('refs/notes/none'), undefined);
    assert.equal(reader.resolveRef('refs/../../config'), undefined);
  } finally {
    reader.close();
  }
});

/** A note as the writer stores it, on `oid`. */
const noteOn = (oid: string, seq: number): { commitOid: string; note: CheckpointNote } => ({
  commitOid: oid,
  note: {
    workspaceId: 'acme',
    agentRunId: 'run-1',
    checkpointSeq: seq,
    step: seq,
    hash: `h${seq}`,
    prevHash: null,
    branch: 'b',
    files: [],
  },
});

/** `n` distinct commits, made by one fast-import (a spawn per commit would take seconds). */
async function manyCommits(repo: string, n: number): Promise<string[]> {
  const marks = path.join(repo, '.git', 'test-marks');
  const stream = Array.from(
    { length: n },
    (_, i) => `commit refs/test/c${i}\nmark :${i + 1}\ncommitter T <t@t> ${i} +0000\ndata ${`c${i}`.length}\nc${i}\n`,
  ).join('');
  await runGit(repo, ['fast-import', '--quiet', `--export-marks=${marks}`], { input: stream });
  const oids = new Map(
    readFileSync(marks, 'utf8')
      .trim()
      .split('\n')
      .map((l) => [Number(l.split(' ')[0]!.slice(1)), l.split(' ')[1]!]),
  );
  return Array.from({ length: n }, (_, i) => oids.get(i + 1)!);
}

for (const notes of [3, 300]) {
  test(`the note lookup reads in-process what git reads (${notes} notes: fanout ${notes > 256 ? '1' : '0'})`, async () => {
    const repo = await makeRepo({ 'a.txt': 'a\n' });
    const commits = await manyCommits(repo, notes);
    const unnoted = commits.pop()!;
    await writeCheckpointNotes(
      repo,
      'refs/notes/echodo',
      commits.map((oid, i) => noteOn(oid, i + 1)),
    );
    const fanout = (await git(repo, 'ls-tree', 'refs/notes/echodo')).split('\n')[0]!.split('\t')[1]!.length;
    assert.equal(fanout, notes > 256 ? 2 : 40, 'the notes tree has the fanout this case is about');
    const latest = commits.at(-1)!;

    const inProcess = readNotesInProcess(repo, 'refs/notes/echodo', commits, latest, latest);
    assert.ok(inProcess, 'answered without git');
    assert.deepEqual([...inProcess.noted].sort(), [...commits].sort());
    assert.equal(inProcess.note?.checkpointSeq, commits.length);
    assert.equal(inProcess.tree, await git(repo, 'rev-parse', `${latest}^{tree}`));
    assert.equal(JSON.stringify(inProcess.note), await git(repo, 'notes', '--ref=refs/notes/echodo', 'show', latest));

    // A commit without a note is not answered in-process: git's own notes code says so.
    assert.equal(readNotesInProcess(repo, 'refs/notes/echodo', [...commits, unnoted], unnoted), undefined);
    const viaGit = await lookupNotes(repo, 'refs/notes/echodo', [...commits, unnoted], unnoted);
    assert.equal(viaGit.noted.has(unnoted), false);
    assert.equal(viaGit.noted.size, commits.length);
    assert.equal(viaGit.note, undefined);
  });
}

test('a linked worktree finds its repository without git', async () => {
  const repo = await makeRepo({ 'a.txt': 'a\n' });
  const wt = path.join(repo, '..', `${path.basename(repo)}-wt`);
  await git(repo, 'worktree', 'add', '-q', wt, '-b', 'other');
  assert.equal(commonDirOnDisk(wt), path.join(repo, '.git'));
  assert.equal(commonDirOnDisk(repo), path.join(repo, '.git'));
  assert.equal(commonDirOnDisk(path.join(repo, 'nowhere')), undefined);
});
