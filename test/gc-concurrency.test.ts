// `git gc --prune=now` and `git repack -ad` run on the repository while a run checkpoints (and
// packs its own objects): no checkpoint commit or note is lost, the worktree's index stays
// consistent, and the run verifies intact. Driven through the real CheckpointWriter.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { createWorkspace } from '../store/runs.ts';
import { withWorkspace } from '../store/workspace.ts';
import { createTestDatabase, type TestDatabase } from '../testbed/db.ts';
import { git, makeRepo } from './support/git.ts';
import { assertCheckpointsIntact, startDrivenRun } from './support/checkpoint-run.ts';
import { gcAndRepackLoop } from './support/git-maintenance.ts';

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

  const maintenance = gcAndRepackLoop(repo);
  try {
    for (let seq = 1; seq <= 40 || maintenance.counts.repack < 3; seq++) {
      await r.round({
        [`src/m-${seq % 30}.ts`]: `export const m = ${seq};\n`,
        [`src/new-${seq}.ts`]: `export const n = ${seq};\n`,
      });
    }
    await r.writer.settleNotes();
  } finally {
    await maintenance.stop();
  }
  const { gc, repack } = maintenance.counts;
  assert.ok(
    gc >= 3 && repack >= 3,
    `maintenance ran several times during the run (${JSON.stringify(maintenance.counts)})`,
  );
  await assertCheckpointsIntact(t.db, t.config, repo, r);
  await git(r.worktree, 'diff-index', '--cached', '--quiet', 'HEAD'); // index == tip tree (throws otherwise)
});
