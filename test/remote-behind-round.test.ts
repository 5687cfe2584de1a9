// With WORKER_CHECKPOINT_REMOTE, a checkpoint counts behind the round (worker/checkpoints/writer.ts):
// write() returns once the commit is made, the push and then the row run while the model works
// on the next round, and the next tool call (readyForTools) waits for both. So the remote's
// round trip leaves the round's path, and still no round runs on a checkpoint that has not
// counted, and no row names a commit the remote lacks. A real bare remote behind `git daemon`.
import assert from 'node:assert/strict';
import { mkdtemp, realpath } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, test } from 'node:test';
import { checkpointChain, type CheckpointRow } from '../store/checkpoints.ts';
import { createWorkspace } from '../store/runs.ts';
import { withWorkspace } from '../store/workspace.ts';
import { CheckpointRemoteError } from '../worker/remote/push.ts';
import { assertCheckpointsIntact, startDrivenRun, type DrivenRun } from './support/checkpoint-run.ts';
import { createTestDatabase, type TestDatabase } from '../testbed/db.ts';
import { startGitDaemon, type GitDaemon } from '../testbed/git-daemon.ts';
import { git, makeRepo } from './support/git.ts';

let t: TestDatabase;
let daemon: GitDaemon;
let repo: string;
let remoteDir: string;
before(async () => {
  t = await createTestDatabase();
  await withWorkspace(t.db.app, 'acme', (tx) => createWorkspace(tx));
  repo = await makeRepo({ 'README.md': '# remote behind the round\n', 'src/a.ts': 'export const a = 0;\n' });
  const base = await realpath(await mkdtemp(path.join(os.tmpdir(), 'echodo-remote-')));
  remoteDir = path.join(base, 'remote.git');
  await git(base, 'clone', '-q', '--bare', repo, remoteDir);
  daemon = await startGitDaemon(base);
});
after(async () => {
  await daemon?.stop();
  await t?.drop();
});

const rows = (r: DrivenRun): Promise<CheckpointRow[]> =>
  withWorkspace(t.db.app, 'acme', (tx) => checkpointChain(tx, r.run.id));
const remoteTip = (r: DrivenRun) =>
  git(remoteDir, 'rev-parse', '--verify', '--quiet', `refs/heads/${r.branch}`).catch(() => null);

test(
  'the push and the row run behind the round; the next tool call waits until the checkpoint counted',
  { timeout: 120_000 },
  async () => {
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    let pushes = 0;
    const r = await startDrivenRun({
      db: t.db,
      config: t.config,
      workspaceId: 'acme',
      repo,
      remote: {
        url: daemon.url('remote.git'),
        aroundPush: async (push) => (++pushes === 1 ? held.then(push) : push()),
      },
    });
    await r.round({ 'src/a.ts': 'export const a = 1;\n' }); // write() returns with its push held
    assert.equal(pushes, 1, 'the push started');
    assert.equal((await rows(r)).length, 0, 'no row before the remote acknowledged the push');
    assert.equal(await remoteTip(r), null, 'the remote has no branch for the run yet');

    let ready = false;
    const waiting = r.writer.readyForTools().then(() => (ready = true));
    await sleep(500);
    assert.equal(ready, false, 'a tool call waits while the push is held');
    assert.equal(r.writer.state.seq, 0, 'the run is still at the checkpoint before');

    release();
    await waiting;
    const [first] = await rows(r);
    assert.equal(first?.checkpoint_seq, 1, 'the row is in once the push was acknowledged');
    assert.equal(await remoteTip(r), first!.commit_oid, 'the row names the commit on the remote');
    assert.equal(r.writer.state.seq, 1);

    await r.round({ 'src/b.ts': 'export const b = 2;\n' });
    await r.writer.settleNotes(); // the run's end: the last checkpoint counted and its note pushed
    const chain = await rows(r);
    assert.deepEqual(
      chain.map((c) => c.checkpoint_seq),
      [1, 2],
    );
    assert.equal(await remoteTip(r), chain[1]!.commit_oid);
    await assertCheckpointsIntact(t.db, t.config, repo, r);
  },
);

test(
  'a push failing behind the round: no row for it, and the next tool call, checkpoint and settle all throw why',
  { timeout: 120_000 },
  async () => {
    const r = await startDrivenRun({
      db: t.db,
      config: t.config,
      workspaceId: 'acme',
      repo,
      remote: { url: daemon.url('remote.git') },
    });
    await r.round({ 'src/a.ts': 'export const a = 10;\n' });
    await r.writer.readyForTools();
    await daemon.stop();
    try {
      await r.round({ 'src/a.ts': 'export const a = 11;\n' }); // returns: the push fails behind it
      await assert.rejects(r.writer.readyForTools(), CheckpointRemoteError, 'the next tool call does not run');
      await assert.rejects(r.writer.write(), CheckpointRemoteError, 'no checkpoint is built on it');
      await assert.rejects(r.writer.settleNotes(), CheckpointRemoteError, 'the run does not complete');
      await r.writer.quiesce(); // what a failed attempt awaits before it is released: never throws
    } finally {
      await daemon.start();
    }
    const chain = await rows(r);
    assert.deepEqual(
      chain.map((c) => c.checkpoint_seq),
      [1],
      'the run stays at its last counted checkpoint',
    );
    assert.equal(r.writer.state.seq, 1);
    assert.equal(await remoteTip(r), chain[0]!.commit_oid, "every row's commit is on the remote");
  },
);
