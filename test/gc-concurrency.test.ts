// `git gc --prune=now` and `git repack -ad` run on the repository while a run checkpoints (and
// packs its own objects): no checkpoint commit or note is lost, the worktree's index stays
// consistent, and the run verifies intact. Driven through the real CheckpointWriter.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { checkpointChain } from '../store/checkpoints.ts';
import { createWorkspace } from '../store/runs.ts';
import { withWorkspace } from '../store/workspace.ts';
import { notedCommits } from '../worker/checkpoints/notes.ts';
import { checkRunIntegrity } from '../worker/integrity.ts';
import { createTestDatabase, type TestDatabase } from './support/db.ts';
import { git, makeRepo } from './support/git.ts';
import { startDrivenRun } from './support/checkpoint-run.ts';

let t: TestDatabase;
before(async () => {
  t = await createTestDatabase();
  await withWorkspace(t.db.app, 'acme', (tx) => createWorkspace(tx));
});
after(async () => {
  await t?.drop();
});

test('git gc --prune=now and git repack -ad during a run lose nothing', { timeout: 300_000 }, async () => {
  const files: Record<string, string> = {};
  for (let i = 0; i < 30; i++) files[`src/m-${i}.ts`] = `export const m = ${i};\n`;
  const repo = await makeRepo(files);
  const r = await startDrivenRun({ db: t.db, config: t.config, workspaceId: 'acme', repo, packEvery: 4 });

  let done = false;
  const maintenance = { gc: 0, repack: 0 };
  const maintainer = (async () => {
    while (!done) {
      await git(repo, 'gc', '--prune=now', '--quiet');
      maintenance.gc++;
      await git(repo, 'repack', '-a', '-d', '-q');
      maintenance.repack++;
    }
  })();
  try {
    for (let seq = 1; seq <= 40 || maintenance.repack < 3; seq++) {
      await r.round({ [`src/m-${seq % 30}.ts`]: `export const m = ${seq};\n`, [`src/new-${seq}.ts`]: `export const n = ${seq};\n` });
    }
    await r.writer.settleNotes();
  } finally {
    done = true;
    await maintainer;
  }
  assert.ok(maintenance.gc >= 3 && maintenance.repack >= 3, `maintenance ran several times during the run (${JSON.stringify(maintenance)})`);

  const chain = await withWorkspace(t.db.app, 'acme', (tx) => checkpointChain(tx, r.run.id));
  const onBranch = new Set((await git(repo, 'rev-list', `refs/heads/${r.branch}`)).split('\n'));
  const noted = await notedCommits(repo, t.config.WORKER_NOTES_REF);
  for (const row of chain) {
    assert.ok(onBranch.has(row.commit_oid!), `checkpoint ${row.checkpoint_seq}'s commit is on the branch`);
    assert.ok(noted.has(row.commit_oid!), `checkpoint ${row.checkpoint_seq}'s note is there`);
  }
  await git(repo, 'fsck', '--connectivity-only', '--no-progress'); // throws on a missing object
  assert.equal(await git(r.worktree, 'status', '--porcelain'), '', 'the worktree matches its index and the tip');
  await git(r.worktree, 'diff-index', '--cached', '--quiet', 'HEAD'); // index == tip tree (throws otherwise)
  const report = await checkRunIntegrity(t.db, t.config, 'acme', r.run.id);
  assert.deepEqual(report!.findings, [], 'integrity intact');
});
