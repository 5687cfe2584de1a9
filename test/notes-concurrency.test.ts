// Notes refs are shared by every worktree of a repository and concurrent `git notes add` loses
// notes silently. Six workers checkpointing runs of one repository at once: every note present.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { readCheckpointNote, writeCheckpointNote } from '../worker/checkpoints/notes.ts';
import type { Child } from './support/child.ts';
import { git, makeRepo } from './support/git.ts';
import { createScenario, sampleSteps, type Scenario } from './support/scenario.ts';

const WORKERS = 6;
let s: Scenario;
const workers: Child[] = [];

before(async () => {
  s = await createScenario({ steps: sampleSteps(0, 8) });
});
after(async () => {
  await Promise.all(workers.map((w) => w.stop('SIGKILL', 100)));
  await s?.close();
});

test(
  `${WORKERS} workers checkpointing runs of the same repository: every note is present`,
  { timeout: 90_000 },
  async () => {
    const ids: string[] = [];
    for (let i = 0; i < WORKERS; i++) ids.push((await s.dispatch()).agentRunId);
    for (let i = 0; i < WORKERS; i++) workers.push(s.spawnWorker());
    for (const id of ids) await s.waitForStatus(id, 'completed', 60_000);
    const rows =
      await s.su`select agent_run_id, checkpoint_seq, commit_oid, hash from worker_checkpoints where agent_run_id in ${s.su(ids)}`;
    assert.equal(rows.length, WORKERS * 8);
    const listed = (await git(s.repo, 'notes', `--ref=${s.config.WORKER_NOTES_REF}`, 'list'))
      .split('\n')
      .filter(Boolean);
    assert.equal(listed.length, rows.length, 'one note per checkpoint commit');
    for (const row of rows) {
      const note = await readCheckpointNote(s.repo, s.config.WORKER_NOTES_REF, row.commit_oid);
      assert.equal(note?.hash, row.hash, `note for ${row.agent_run_id} seq ${row.checkpoint_seq}`);
    }
  },
);

test('the serialized writer keeps all of 40 concurrent note writes in one process', async () => {
  const repo = await makeRepo({ 'a.txt': 'a\n' });
  const commits: string[] = [];
  for (let i = 0; i < 40; i++) {
    await git(repo, 'commit', '-q', '--allow-empty', '-m', `c${i}`);
    commits.push(await git(repo, 'rev-parse', 'HEAD'));
  }
  const ref = 'refs/notes/echodo-checkpoints';
  await Promise.all(
    commits.map((c, i) =>
      writeCheckpointNote(repo, ref, c, {
        workspaceId: 'w',
        agentRunId: 'r',
        checkpointSeq: i + 1,
        step: i + 1,
        hash: `h${i}`,
        prevHash: null,
        branch: 'b',
        files: [],
      }),
    ),
  );
  for (const [i, c] of commits.entries()) assert.equal((await readCheckpointNote(repo, ref, c))?.checkpointSeq, i + 1);
});
