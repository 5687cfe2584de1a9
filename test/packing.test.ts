// Packing a run's checkpoint objects (worker/checkpoints/git/packing.ts): the roll-ups keep the packs
// few while the run goes on; settling merges the run's packs into a pack of trees (each folder's
// versions deltas of one another, found by the folder's path) and a pack of everything else; and
// neither loses an object while someone runs `git gc --prune=now` or `git repack -ad` on the
// repository at the same time.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readdir, stat, utimes, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { createWorkspace } from '../store/runs.ts';
import { withWorkspace } from '../store/workspace.ts';
import { ObjectPacker } from '../worker/checkpoints/git/packing.ts';
import { runGit } from '../worker/git/run-git.ts';
import { createTestDatabase, type TestDatabase } from '../testbed/db.ts';
import { git, makeRepo } from './support/git.ts';
import { assertCheckpointsIntact, silentLog, startDrivenRun } from './support/checkpoint-run.ts';
import { gcAndRepackLoop } from './support/git-maintenance.ts';

let t: TestDatabase;
before(async () => {
  t = await createTestDatabase();
  await withWorkspace(t.db.app, 'acme', (tx) => createWorkspace(tx));
});
after(async () => {
  await t?.drop();
});

/** A repository whose files sit two directories deep, so every change rewrites three trees. */
async function nestedRepo(): Promise<string> {
  const files: Record<string, string> = {};
  for (let m = 0; m < 8; m++)
    for (let i = 0; i < 12; i++) files[`src/m${m}/f${i}.ts`] = `export const f${m}_${i} = 0;\n`;
  return makeRepo(files);
}

/** A round that rewrites 3 files in 3 directories, different ones every round. */
const change = (seq: number): Record<string, string> => {
  const out: Record<string, string> = {};
  for (let k = 0; k < 3; k++)
    out[`src/m${(seq + 3 * k) % 8}/f${(seq * 5 + k) % 12}.ts`] = `export const v = ${seq}; // ${k}\n`;
  return out;
};

async function packFiles(repo: string): Promise<{ packs: number; bytes: number }> {
  const dir = path.join(repo, '.git', 'objects', 'pack');
  let packs = 0;
  let bytes = 0;
  for (const name of await readdir(dir)) {
    if (!name.endsWith('.pack') && !name.endsWith('.idx')) continue;
    const size = (await stat(path.join(dir, name)).catch(() => undefined))?.size;
    if (size === undefined) continue; // gone: a roll-up behind the run merged it
    if (name.endsWith('.pack')) packs++;
    bytes += size;
  }
  return { packs, bytes };
}

/** The repository's own objects in one pack, written an hour before the run (as a repository's are). */
async function ownPackOlderThanTheRun(repo: string): Promise<void> {
  await git(repo, 'repack', '-a', '-d', '-q');
  const packDir = path.join(repo, '.git', 'objects', 'pack');
  const anHourAgo = new Date(Date.now() - 3_600_000);
  for (const name of await readdir(packDir)) await utimes(path.join(packDir, name), anHourAgo, anHourAgo);
}

test(
  'settling consolidates the packs the roll-ups left into two, smaller, and loses nothing',
  { timeout: 300_000 },
  async () => {
    const repo = await nestedRepo();
    await ownPackOlderThanTheRun(repo);
    const runStart = Date.now() - 1000;
    const r = await startDrivenRun({ db: t.db, config: t.config, workspaceId: 'acme', repo, packEvery: 4 });
    for (let seq = 1; seq <= 46; seq++) await r.round(change(seq));
    // What the run leaves before its settle: the roll-ups' packs and the last checkpoints' small ones.
    await new ObjectPacker(r.worktree, 4, silentLog).packNow();
    for (let seq = 47; seq <= 50; seq++) await r.round(change(seq));
    const before = await packFiles(repo);
    assert.ok(before.packs >= 3, `${before.packs} packs before the settle: something to consolidate`);

    await r.writer.settleNotes();
    const after = await packFiles(repo);
    assert.equal(after.packs, 3, "the repository's own pack, and the run's: one of trees, one of everything else");
    assert.ok(
      after.bytes < before.bytes,
      `consolidated: ${after.bytes} bytes of packs and indexes, ${before.bytes} before`,
    );
    assert.equal(await git(repo, 'count-objects'), '0 objects, 0 kilobytes', 'nothing loose');
    await assertCheckpointsIntact(t.db, t.config, repo, r);
    assert.equal(
      await new ObjectPacker(r.worktree, 4, silentLog, runStart).consolidate(),
      false,
      'a second settle has nothing to do',
    );
  },
);

test(
  'settling leaves one whole tree per folder, every other version a delta found by its path',
  { timeout: 300_000 },
  async () => {
    // 40 folders of the same size: git's delta search, told no paths, mixes them in its window.
    const files: Record<string, string> = {};
    const folder = (m: number) => `src/m${String(m).padStart(2, '0')}`;
    for (let m = 0; m < 40; m++)
      for (let i = 0; i < 10; i++) files[`${folder(m)}/f${i}.ts`] = `export const f${m}_${i} = 0;\n`;
    const repo = await makeRepo(files);
    await ownPackOlderThanTheRun(repo);
    const r = await startDrivenRun({ db: t.db, config: t.config, workspaceId: 'acme', repo, packEvery: 4 });
    for (let seq = 1; seq <= 60; seq++) {
      const round: Record<string, string> = {};
      for (let k = 0; k < 4; k++)
        round[`${folder((seq * 7 + k * 11) % 40)}/f${(seq + k) % 10}.ts`] = `export const v = ${seq};\n`;
      await r.round(round);
    }
    await r.writer.settleNotes();

    const listed = await git(repo, 'rev-list', '--objects', r.branch, '--not', 'main');
    const paths = new Map(listed.split('\n').map((line) => [line.slice(0, 40), line.slice(41)] as const));
    const input = [...paths.keys()].join('\n') + '\n';
    const check = await runGit(repo, ['cat-file', '--batch-check=%(objectname) %(objecttype) %(deltabase)'], { input });
    const whole = new Map<string, number>();
    let trees = 0;
    for (const [oid, type, base] of check.stdout
      .trim()
      .split('\n')
      .map((line) => line.split(' '))) {
      if (type !== 'tree' || paths.get(oid!) === '') continue; // a root of one entry is too small to be a delta
      trees++;
      if (/^0+$/.test(base!)) whole.set(paths.get(oid!)!, (whole.get(paths.get(oid!)!) ?? 0) + 1);
    }
    assert.ok(trees >= 60 * 5, `${trees} trees written`);
    const twice = [...whole].filter(([, n]) => n > 1);
    const wholeTrees = [...whole.values()].reduce((a, b) => a + b, 0);
    assert.deepEqual(twice, [], `each folder whole once (${wholeTrees} whole of ${trees})`);
    await assertCheckpointsIntact(t.db, t.config, repo, r);
  },
);

test('a consolidation whose new pack is one of the packs it merged keeps that pack', async () => {
  const repo = await nestedRepo();
  await git(repo, 'repack', '-a', '-d', '-q'); // the repository's own objects: the largest pack
  for (let seq = 1; seq <= 3; seq++) {
    for (const [file, text] of Object.entries(change(seq))) await writeFile(path.join(repo, file), text);
    await git(repo, 'commit', '-q', '-am', `change ${seq}`);
  }
  const objects = (await git(repo, 'rev-list', '--objects', 'HEAD~3..HEAD'))
    .split('\n')
    .map((line) => line.slice(0, 40));
  const packOf = (ids: string[]) =>
    runGit(repo, ['pack-objects', '-q', '.git/objects/pack/pack'], { input: ids.join('\n') + '\n' });
  await packOf(objects.slice(0, 5));
  await packOf(objects.slice(5));
  await git(repo, 'prune-packed');
  const packer = new ObjectPacker(repo, 1, silentLog, 0);
  assert.equal(await packer.consolidate(), true, 'the two new packs into a pack of trees and a pack of the rest');
  // A pack holding a subset of that one (as a roll-up racing a consolidation leaves): merging both
  // writes the same objects again, which is the same pack name.
  await packOf(objects.slice(0, 1));
  assert.equal((await packFiles(repo)).packs, 4);
  assert.equal(await packer.consolidate(), true);
  assert.equal((await packFiles(repo)).packs, 3, 'the largest and the two consolidated packs');
  const missing = await runGit(repo, ['cat-file', '--batch-check'], { input: objects.join('\n') + '\n' });
  assert.doesNotMatch(missing.stdout, /missing/, 'every object of the three commits is still there');
  await git(repo, 'fsck', '--connectivity-only', '--no-dangling');
});

test(
  "settling leaves packs older than the run alone (earlier runs' consolidated packs are not rewritten)",
  { timeout: 300_000 },
  async () => {
    const repo = await nestedRepo();
    const packDir = path.join(repo, '.git', 'objects', 'pack');
    // What earlier runs' settles left: two packs whose object counts (what git's geometric roll-up
    // weighs) form a progression above the repository's own, so the run's roll-ups leave them alone
    // too; an hour old.
    const oldPack = async (objects: number) => {
      const had = new Set(await readdir(packDir).catch(() => []));
      const blobs = Array.from(
        { length: objects },
        (_, i) => `blob\ndata 20\n${randomBytes(6).toString('hex')}-${String(i).padStart(7, '0')}\n`,
      );
      await runGit(repo, ['-c', 'fastimport.unpackLimit=1', 'fast-import', '--quiet'], { input: blobs.join('') });
      return (await readdir(packDir)).find((name) => name.endsWith('.pack') && !had.has(name))!.replace(/\.pack$/, '');
    };
    const older = [await oldPack(8_000), await oldPack(2_000)];
    const anHourAgo = new Date(Date.now() - 3_600_000);
    for (const stem of older)
      for (const ext of ['.pack', '.idx']) await utimes(path.join(packDir, stem + ext), anHourAgo, anHourAgo);

    const runStart = Date.now() - 1000;
    const r = await startDrivenRun({ db: t.db, config: t.config, workspaceId: 'acme', repo, packEvery: 4 });
    for (let seq = 1; seq <= 20; seq++) await r.round(change(seq));
    await r.writer.settleNotes();
    const after = await readdir(packDir);
    for (const stem of older)
      assert.ok(
        after.includes(`${stem}.pack`) && after.includes(`${stem}.idx`),
        `${stem}, older than the run, is untouched`,
      );
    const written: string[] = [];
    for (const name of after)
      if (name.endsWith('.pack') && (await stat(path.join(packDir, name))).mtimeMs >= runStart) written.push(name);
    assert.equal(written.length, 2, `the run's objects in a pack of trees and one of the rest (${written.join(', ')})`);
    await assertCheckpointsIntact(t.db, t.config, repo, r);
  },
);

test(
  'roll-ups and consolidations during git gc --prune=now and git repack -ad lose nothing',
  { timeout: 300_000 },
  async () => {
    const repo = await nestedRepo();
    const r = await startDrivenRun({ db: t.db, config: t.config, workspaceId: 'acme', repo, packEvery: 2 });
    const packer = new ObjectPacker(r.worktree, 1, silentLog);
    let done = false;
    const counts = { consolidated: 0, attempts: 0 };
    const maintenance = gcAndRepackLoop(repo);
    // Another settle (a second run of the same repository finishing) consolidating over and over.
    const consolidator = (async () => {
      while (!done) {
        await packer.packNow();
        counts.attempts++;
        if (await packer.consolidate()) counts.consolidated++;
      }
    })();
    try {
      for (let seq = 1; seq <= 40 || (seq <= 400 && (maintenance.counts.repack < 3 || counts.consolidated < 3)); seq++)
        await r.round(change(seq));
      await r.writer.settleNotes();
    } finally {
      done = true;
      await Promise.all([maintenance.stop(), consolidator]);
    }
    const all = { ...maintenance.counts, ...counts };
    assert.ok(
      all.gc >= 3 && all.repack >= 3 && all.consolidated >= 3,
      `all of them ran several times (${JSON.stringify(all)})`,
    );
    await assertCheckpointsIntact(t.db, t.config, repo, r);
  },
);
