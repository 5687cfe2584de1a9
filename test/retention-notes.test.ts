// The storage sweep prunes git as well as Postgres: a finished run of six real checkpoints (the real
// writer, each a commit with its note) under a keep-last-2 policy loses rows 2-4 and their notes,
// keeps the notes of its first and last two (and every other run's), its chain (across the gap) and
// notes still verify, and the workspace's git bytes, as the sweep measures them for the quota, fall. With a
// checkpoint remote (a bare repository behind a real `git daemon`), the run's notes ref there, and
// this host's copy of it, keep the kept checkpoints' notes only; while the remote is down, the run
// waits for the next sweep with its rows and notes.
import assert from 'node:assert/strict';
import { mkdtemp, realpath } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import type { Sql } from 'postgres';
import { checkRunIntegrity } from '../operator/integrity.ts';
import { sweepStoragePolicies } from '../operator/storage-sweep.ts';
import { verifyChain } from '../core/checkpoint-hash.ts';
import { checkpointChain } from '../store/checkpoints.ts';
import { chainAnchors } from '../store/retention.ts';
import { createWorkspace } from '../store/runs.ts';
import { setQuota, setRetention } from '../store/storage.ts';
import { withWorkspace } from '../store/workspace.ts';
import { notedCommits } from '../worker/checkpoints/notes.ts';
import { runNotesRef } from '../worker/remote/push.ts';
import { startGitDaemon } from '../testbed/git-daemon.ts';
import { createTestDatabase, superuserSql, type TestDatabase } from '../testbed/db.ts';
import { silentLog, startDrivenRun, type DrivenRun } from './support/checkpoint-run.ts';
import { git, makeRepo } from './support/git.ts';

const WS = 'keep';
let t: TestDatabase;
let su: Sql;

before(async () => {
  t = await createTestDatabase();
  su = superuserSql(t.url);
  await withWorkspace(t.db.app, WS, (tx) => createWorkspace(tx));
});
after(async () => {
  await su?.end();
  await t?.drop();
});

async function finishedRun(repo: string, rounds: number, workspaceId = WS, remote?: string): Promise<DrivenRun> {
  const r = await startDrivenRun({
    db: t.db,
    config: t.config,
    workspaceId,
    repo,
    ...(remote ? { remote: { url: remote } } : {}),
  });
  for (let i = 1; i <= rounds; i++) await r.round({ [`src/f${i}.ts`]: `export const f = ${i};\n`.repeat(50) });
  await r.writer.settleNotes();
  await su`update agent_runs set status = 'completed', finished_at = now() - interval '1 day' where id = ${r.run.id}`;
  return r;
}

test("the sweep removes the pruned checkpoints' notes with their rows; git bytes fall", async () => {
  const repo = await makeRepo({ 'README.md': 'hello\n' });
  const big = await finishedRun(repo, 6);
  const small = await finishedRun(repo, 2);
  const sweep = () =>
    sweepStoragePolicies({ db: t.db, log: silentLog, repoRoot: repo, notesRef: t.config.WORKER_NOTES_REF });
  const commitsOf = async (r: DrivenRun) =>
    (await withWorkspace(t.db.app, WS, (tx) => checkpointChain(tx, r.run.id))).map((row) => row.commit_oid!);
  const bigCommits = await commitsOf(big);
  const smallCommits = await commitsOf(small);
  assert.equal(bigCommits.length, 6);

  // A quota alone: the sweep measures, prunes nothing.
  await withWorkspace(t.db.app, WS, (tx) => setQuota(tx, 1e12));
  const [measured] = (await sweep()).workspaces;
  assert.equal(measured!.rowsPruned, 0);
  assert.ok(measured!.gitBytes > 0, 'the branches and notes are counted');

  await withWorkspace(t.db.app, WS, (tx) => setRetention(tx, 2, 0));
  const [pruned] = (await sweep()).workspaces;
  assert.equal(pruned!.rowsPruned, 3);
  assert.equal(pruned!.notesRemoved, 3);
  assert.deepEqual(pruned!.pending, []);
  assert.ok(pruned!.gitBytes < measured!.gitBytes, `git bytes fell: ${measured!.gitBytes} -> ${pruned!.gitBytes}`);

  const noted = await notedCommits(repo, t.config.WORKER_NOTES_REF);
  const keptCommits = [bigCommits[0]!, ...bigCommits.slice(4), ...smallCommits];
  for (const oid of bigCommits.slice(1, 4)) assert.ok(!noted.has(oid), `pruned ${oid.slice(0, 8)} lost its note`);
  for (const oid of keptCommits) assert.ok(noted.has(oid), `kept ${oid.slice(0, 8)}`);
  const rows = await withWorkspace(t.db.app, WS, (tx) => checkpointChain(tx, big.run.id));
  assert.deepEqual(
    rows.map((r) => r.checkpoint_seq),
    [1, 5, 6],
    'the first checkpoint and the last two',
  );
  const anchors = await withWorkspace(t.db.app, WS, (tx) => chainAnchors(tx, big.run.id));
  assert.ok(verifyChain(rows, anchors).ok, 'the chain verifies across the gap');
  assert.equal(verifyChain([rows[0]!, rows[2]!], anchors).ok, false, 'a kept row missing breaks it');
  const report = await checkRunIntegrity(t.db, t.config, WS, big.run.id, { repairNotes: true });
  assert.equal(report?.intact, true, JSON.stringify(report?.findings));
  assert.deepEqual(report?.notesRepair, { rewritten: [], offBranch: [] }, 'every kept checkpoint had its note');
});

test("with a checkpoint remote, the run's notes ref there keeps the kept checkpoints' notes only", async () => {
  const ws = 'keep-remote';
  await withWorkspace(t.db.app, ws, (tx) => createWorkspace(tx));
  const repo = await makeRepo({ 'README.md': 'hello\n' });
  const base = await realpath(await mkdtemp(path.join(os.tmpdir(), 'echodo-remote-')));
  const remoteDir = path.join(base, 'remote.git');
  await git(base, 'clone', '-q', '--bare', repo, remoteDir);
  const daemon = await startGitDaemon(base);
  try {
    const url = daemon.url('remote.git');
    const r = await finishedRun(repo, 4, ws, url);
    const commits = (await withWorkspace(t.db.app, ws, (tx) => checkpointChain(tx, r.run.id))).map(
      (c) => c.commit_oid!,
    );
    const notesRef = runNotesRef(ws, r.run.id);
    const notesIn = async (dir: string) =>
      (await git(dir, 'ls-tree', '-r', '--name-only', notesRef)).split('\n').map((p) => p.replaceAll('/', ''));
    assert.deepEqual((await notesIn(remoteDir)).sort(), [...commits].sort(), 'every note on the remote');

    await withWorkspace(t.db.app, ws, (tx) => setRetention(tx, 2, 0));
    const sweep = async () =>
      (
        await sweepStoragePolicies({
          db: t.db,
          log: silentLog,
          repoRoot: repo,
          notesRef: t.config.WORKER_NOTES_REF,
          remote: url,
        })
      ).workspaces.find((w) => w.workspaceId === ws)!;
    await daemon.stop();
    const down = await sweep();
    await daemon.start();
    assert.deepEqual(
      down.pending.map((p) => p.agentRunId),
      [r.run.id],
      'the remote down: the run waits',
    );
    assert.equal(down.rowsPruned, 0);
    const noted = await notedCommits(repo, t.config.WORKER_NOTES_REF);
    assert.ok(
      commits.every((c) => noted.has(c)),
      'its notes here stay too',
    );
    const swept = await sweep();
    assert.deepEqual(swept.pending, []);
    assert.equal(swept.rowsPruned, 1);
    const kept = [commits[0]!, ...commits.slice(2)].sort();
    assert.deepEqual((await notesIn(remoteDir)).sort(), kept, "the remote's notes ref: the kept checkpoints' notes");
    assert.deepEqual((await notesIn(repo)).sort(), kept, "this host's copy follows");
  } finally {
    await daemon.stop();
  }
});
