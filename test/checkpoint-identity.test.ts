// A checkpoint commit belongs to one run. Run ids are unique per workspace only, and the notes ref
// is shared by every run of a repository: two runs with the same id in two workspaces that make the
// same change in the same second must still make two commits, or one run's note would overwrite
// the other's (seen in CI: `note_mismatch` on a re-dispatched run whose id was reused in another
// workspace). The clock is frozen, so both checkpoints land in the same second every time.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, mock, test } from 'node:test';
import { createWorkspace } from '../store/runs.ts';
import { withWorkspace } from '../store/workspace.ts';
import { readCheckpointNote } from '../worker/checkpoints/notes.ts';
import { createTestDatabase, type TestDatabase } from '../testbed/db.ts';
import { makeRepo } from './support/git.ts';
import { startDrivenRun } from './support/checkpoint-run.ts';

let t: TestDatabase;
before(async () => {
  t = await createTestDatabase();
  for (const ws of ['acme', 'other']) await withWorkspace(t.db.app, ws, (tx) => createWorkspace(tx));
});
after(async () => {
  mock.timers.reset();
  await t?.drop();
});

test('one run id in two workspaces, the same change in the same second: two commits, each with its own note', async () => {
  const repo = await makeRepo({ 'src/a.ts': 'export const a = 0;\n' });
  const agentRunId = randomUUID();
  const [acme, other] = [
    await startDrivenRun({ db: t.db, config: t.config, workspaceId: 'acme', repo, agentRunId }),
    await startDrivenRun({ db: t.db, config: t.config, workspaceId: 'other', repo, agentRunId }),
  ];
  mock.timers.enable({ apis: ['Date'], now: Date.UTC(2026, 11, 2, 5, 0, 0) });
  try {
    for (const r of [acme, other]) {
      await r.round({ 'src/a.ts': 'export const a = 1;\n' });
      await r.writer.settleNotes();
    }
  } finally {
    mock.timers.reset();
  }
  const [a, o] = [acme.writer.state.headOid!, other.writer.state.headOid!];
  assert.notEqual(a, o, 'two runs, two checkpoint commits');
  for (const [r, commit, workspaceId] of [
    [acme, a, 'acme'],
    [other, o, 'other'],
  ] as const) {
    const note = await readCheckpointNote(repo, t.config.WORKER_NOTES_REF, commit);
    assert.equal(note?.workspaceId, workspaceId, `the note on ${workspaceId}'s commit is ${workspaceId}'s`);
    assert.equal(note?.hash, r.writer.state.prevHash, "and it mirrors that run's row");
  }
});
