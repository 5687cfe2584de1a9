// Retention: `npm run prune -- --older-than 30d [--dry-run]` deletes the checkpoint
// rows of runs finished before the cutoff except each run's last, stores an anchor that keeps the
// hash chain verifiable, and removes their worktrees unless one has uncommitted changes. Running
// and queued runs, and runs finished recently, are left alone. With
// WORKER_CHECKPOINT_RETENTION_DAYS set, the stall detector prunes on its own schedule.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { appendFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { verifyChain } from '../core/checkpoint-hash.ts';
import { readCheckpointNote } from '../worker/checkpoints/notes.ts';
import { checkRunIntegrity } from '../operator/integrity.ts';
import { spawnNode, spawnProcess, type Child } from './support/child.ts';
import { git } from './support/git.ts';
import { createScenario, sampleSteps, type Scenario, type TranscriptStep } from './support/scenario.ts';

let s: Scenario;
const children: Child[] = [];
const runs: Record<'clean' | 'dirty' | 'failed' | 'recent' | 'running' | 'queued', string> = {} as never;
let before_: Map<string, { rows: number; status: string }>;

interface PruneReport {
  runs: number;
  rowsDeleted: number;
  notesRemoved: number;
  worktreesRemoved: string[];
  worktreesKept: { path: string; reason: string }[];
  dryRun: boolean;
}

function spawnPrune(args: string[], env: NodeJS.ProcessEnv = s.env) {
  const c = spawnProcess('npm', ['run', '--silent', 'prune', '--', ...args], { env });
  children.push(c);
  return c;
}

async function npmPrune(...args: string[]): Promise<PruneReport> {
  const c = spawnPrune(['--older-than', '30d', ...args]);
  const exit = await c.exited;
  assert.equal(exit.code, 0, `prune exited ${exit.code}: ${c.output()}`);
  return JSON.parse(c.stdout.join('\n')) as PruneReport;
}

const rowCount = async (id: string) => (await s.checkpoints(id)).length;
/** The note blob on a commit under WORKER_NOTES_REF, or undefined when the commit has none. */
async function noteBlob(commit: string): Promise<string | undefined> {
  return (
    (await git(s.repo, 'notes', `--ref=${s.config.WORKER_NOTES_REF}`, 'list', commit).catch(() => '')) || undefined
  );
}
const hasObject = (oid: string) =>
  git(s.repo, 'cat-file', '-e', oid).then(
    () => true,
    () => false,
  );
async function snapshot() {
  const state = new Map<string, { rows: number; status: string }>();
  for (const id of Object.values(runs)) state.set(id, { rows: await rowCount(id), status: (await s.run(id)).status });
  return state;
}
const ageRuns = (ids: string[]) =>
  s.su`update agent_runs set finished_at = now() - interval '40 days' where id in ${s.su(ids)}`;

before(async () => {
  s = await createScenario({ steps: sampleSteps(10, 4), env: { WORKER_MAX_TOOL_STEPS: '20' } });
  // Three runs completed: one stays clean, one gets a local change, one finished just now.
  for (const name of ['clean', 'dirty', 'recent'] as const) runs[name] = (await s.dispatch()).agentRunId;
  const worker = s.spawnWorker();
  children.push(worker);
  for (const name of ['clean', 'dirty', 'recent'] as const) await s.waitForStatus(runs[name], 'completed');
  await worker.stop('SIGTERM');

  // A failed run with checkpoints: three rounds, then a write on a full disk.
  const failing: TranscriptStep[] = [
    { toolCalls: [{ toolName: 'grep', input: { pattern: 'answer' } }] },
    { toolCalls: [{ toolName: 'read_file', input: { path: 'README.md' } }] },
    { toolCalls: [{ toolName: 'run_command', input: { command: 'git status' } }] },
    { toolCalls: [{ toolName: 'write_file', input: { path: 'x.txt', content: 'x\n' } }] },
    { text: 'never reached' },
  ];
  const failingModel = path.join(path.dirname(s.transcriptPath), 'failing.json');
  await writeFile(failingModel, JSON.stringify({ steps: failing }));
  runs.failed = (await s.dispatch({ model: `replay:${failingModel}` })).agentRunId;
  const full = s.spawnWorker({ ECHODO_FAULT_ERRNO: 'write-file:ENOSPC' });
  children.push(full);
  await s.waitForStatus(runs.failed, 'failed');
  await full.stop('SIGTERM');

  // A run whose worker died mid-run (still 'running'), and one nobody took yet.
  runs.running = (await s.dispatch()).agentRunId;
  const killed = s.spawnWorker({ ECHODO_FAULT: 'after-note@2' });
  children.push(killed);
  await killed.exited;
  runs.queued = (await s.dispatch()).agentRunId;

  await ageRuns([runs.clean, runs.dirty, runs.failed]);
  const dirty = await s.run(runs.dirty);
  await appendFile(path.join(dirty.worktree_path, 'src/greet.ts'), '// a local edit nobody committed\n');
  await writeFile(path.join(dirty.worktree_path, 'scratch.txt'), 'untracked\n');
  before_ = await snapshot();
  assert.equal((await s.run(runs.running)).status, 'running');
  assert.equal((await s.run(runs.queued)).status, 'queued');
});

after(async () => {
  await Promise.all(children.map((c) => c.stop('SIGKILL', 100)));
  await s?.close();
});

const pruned = () => [runs.clean, runs.dirty, runs.failed];
const untouched = () => [runs.recent, runs.running, runs.queued];
let dryReport: PruneReport;
/** The note blobs of the checkpoints the prune deletes. */
const prunedNoteBlobs: string[] = [];

test('--dry-run changes nothing and reports what it would do', async () => {
  dryReport = await npmPrune('--dry-run');
  const [clean, dirty, failed] = await Promise.all(pruned().map((id) => s.run(id)));
  assert.equal(dryReport.dryRun, true);
  assert.equal(dryReport.runs, 3, 'the three runs finished 40 days ago');
  const expectedRows = pruned().reduce((n, id) => n + before_.get(id)!.rows - 1, 0);
  assert.equal(dryReport.rowsDeleted, expectedRows, "counts every row but each run's last");
  assert.deepEqual([...dryReport.worktreesRemoved].sort(), [clean.worktree_path, failed.worktree_path].sort());
  assert.deepEqual(dryReport.worktreesKept, [{ path: dirty.worktree_path, reason: 'has uncommitted changes' }]);

  assert.deepEqual(await snapshot(), before_, 'no row and no status changed');
  assert.equal((await s.su`select count(*)::int as n from checkpoint_anchors`)[0]!.n, 0, 'no anchor written');
  for (const run of [clean, dirty, failed])
    assert.ok(existsSync(run.worktree_path), `${run.worktree_path} still there`);
});

test('without --older-than: WORKER_CHECKPOINT_RETENTION_DAYS is the age, else 30 days', async () => {
  const fromEnv = spawnPrune(['--dry-run'], { ...s.env, WORKER_CHECKPOINT_RETENTION_DAYS: '30' });
  assert.equal((await fromEnv.exited).code, 0, fromEnv.output());
  assert.deepEqual(JSON.parse(fromEnv.stdout.join('\n')), dryReport, 'the same report as --older-than 30d');
  const env = { ...s.env };
  delete env.WORKER_CHECKPOINT_RETENTION_DAYS;
  const neither = spawnPrune(['--dry-run'], env);
  assert.equal((await neither.exited).code, 0, neither.output());
  assert.deepEqual(JSON.parse(neither.stdout.join('\n')), dryReport, 'the same report as --older-than 30d');
  const longer = spawnPrune(['--dry-run'], { ...env, WORKER_CHECKPOINT_RETENTION_DAYS: '100000' });
  assert.equal((await longer.exited).code, 0, longer.output());
  assert.notDeepEqual(JSON.parse(longer.stdout.join('\n')), dryReport, 'the variable is read when set');
  assert.deepEqual(await snapshot(), before_, 'nothing changed');
});

test("prune keeps each run's last checkpoint and an anchor; the chain still verifies", async () => {
  const lastRows = new Map<string, Record<string, any>>();
  const anchors = new Map<string, Record<string, any>>();
  for (const id of pruned()) {
    const rows = await s.checkpoints(id);
    lastRows.set(id, rows.at(-1)!);
    anchors.set(id, rows.at(-2)!);
    for (const row of rows.slice(0, -1)) if (row.commit_oid) prunedNoteBlobs.push((await noteBlob(row.commit_oid))!);
  }
  assert.ok(prunedNoteBlobs.length > 0 && prunedNoteBlobs.every(Boolean), 'every checkpoint to prune has its note');
  const report = await npmPrune();
  assert.equal(report.dryRun, false);
  assert.equal(report.rowsDeleted, dryReport.rowsDeleted, 'deleted what the dry run counted');
  assert.equal(report.notesRemoved, prunedNoteBlobs.length, "the pruned checkpoints' notes removed");

  for (const id of pruned()) {
    const rows = await s.checkpoints(id);
    assert.deepEqual(
      rows.map((r) => r.id),
      [lastRows.get(id)!.id],
      `run ${id}: only its last checkpoint is left`,
    );
    const [anchor] = await s.su`select * from checkpoint_anchors where agent_run_id = ${id}`;
    assert.equal(anchor?.anchor_seq, anchors.get(id)!.checkpoint_seq, 'the anchor is the last deleted row');
    assert.equal(anchor?.anchor_hash, anchors.get(id)!.hash);
    assert.ok(
      verifyChain(rows as never, anchor!.anchor_hash).ok,
      'the remaining row links to the anchor and hashes right',
    );
    const integrity = await checkRunIntegrity(s.t.db, s.config, s.workspaceId, id);
    assert.deepEqual(
      integrity?.findings.filter((f) => f.kind === 'hash_chain_broken'),
      [],
      `run ${id}: no hash_chain_broken`,
    );
    // The content and its mirror stay in git: the branch and the last note are untouched.
    const run = await s.run(id);
    assert.equal(await git(s.repo, 'rev-parse', `refs/heads/${run.branch}`), lastRows.get(id)!.commit_oid);
    assert.equal(
      (await readCheckpointNote(s.repo, s.config.WORKER_NOTES_REF, lastRows.get(id)!.commit_oid))?.hash,
      lastRows.get(id)!.hash,
    );
  }
  // Without the anchor the same rows would not verify: the anchor is what keeps the chain honest.
  assert.equal(verifyChain((await s.checkpoints(runs.clean)) as never).ok, false);
});

test("the pruned checkpoints' notes leave the notes ref, its history too, so git gc gives their bytes back", async () => {
  // Every checkpoint that is left keeps its note: the kept rows of pruned runs, and other runs'.
  const keptBlobs: string[] = [];
  for (const id of [...untouched(), ...pruned()]) {
    for (const row of await s.checkpoints(id)) {
      const blob = row.commit_oid ? await noteBlob(row.commit_oid) : 'no commit';
      assert.ok(blob, `run ${id} seq ${row.checkpoint_seq} keeps its note`);
      if (row.commit_oid) keptBlobs.push(blob);
    }
  }
  const notesRef = s.config.WORKER_NOTES_REF;
  assert.equal(
    await git(s.repo, 'rev-list', '--count', notesRef),
    '1',
    'the notes ref is one commit: its history is gone',
  );
  assert.equal(await git(s.repo, 'reflog', 'show', notesRef), '', 'and so is its reflog');
  // Nothing reaches the removed notes now: gc (here without its two weeks' expiry) drops them.
  await git(s.repo, 'gc', '--quiet', '--prune=now');
  for (const blob of prunedNoteBlobs)
    assert.equal(await hasObject(blob), false, `pruned note ${blob} is gone after gc`);
  for (const blob of keptBlobs) assert.equal(await hasObject(blob), true, `kept note ${blob} is still there`);
  for (const id of pruned()) {
    const findings = (await checkRunIntegrity(s.t.db, s.config, s.workspaceId, id))!.findings;
    assert.deepEqual(
      findings.filter((f) => f.kind.startsWith('note')),
      [],
      `run ${id}: its kept checkpoint's note verifies`,
    );
  }
});

test('prune removes clean worktrees of finished runs and keeps one with uncommitted changes', async () => {
  const [clean, dirty, failed] = await Promise.all(pruned().map((id) => s.run(id)));
  const listed = await git(s.repo, 'worktree', 'list', '--porcelain');
  for (const run of [clean, failed]) {
    assert.equal(existsSync(run.worktree_path), false, `${run.worktree_path} removed`);
    assert.ok(!listed.includes(run.worktree_path), 'and unregistered from the repo');
  }
  assert.ok(existsSync(dirty.worktree_path), 'the worktree with uncommitted changes is kept');
  assert.match(
    await git(dirty.worktree_path, 'status', '--porcelain'),
    /src\/greet\.ts[\s\S]*scratch\.txt/,
    'its changes are intact',
  );
});

test('running, queued and recently finished runs are untouched', async () => {
  const now = await snapshot();
  for (const id of untouched()) assert.deepEqual(now.get(id), before_.get(id), `run ${id}`);
  for (const id of [runs.recent, runs.running])
    assert.ok(existsSync((await s.run(id)).worktree_path), `worktree of ${id} kept`);
  assert.equal(
    (await s.su`select count(*)::int as n from checkpoint_anchors where agent_run_id in ${s.su(untouched())}`)[0]!.n,
    0,
  );
});

test('a second prune finds nothing more to delete and still reports the kept worktree', async () => {
  const report = await npmPrune();
  assert.equal(report.rowsDeleted, 0);
  assert.deepEqual(report.worktreesRemoved, []);
  assert.deepEqual(
    report.worktreesKept.map((k) => k.path),
    [(await s.run(runs.dirty)).worktree_path],
  );
});

test(
  'a prune killed after removing the notes, before deleting the rows, is finished by the next one',
  { timeout: 120_000 },
  async () => {
    const { agentRunId } = await s.dispatch();
    const worker = s.spawnWorker();
    children.push(worker);
    await s.waitForStatus(agentRunId, 'completed');
    await worker.stop('SIGTERM');
    const rows = await s.checkpoints(agentRunId);
    assert.ok(rows.length > 1, 'the run has checkpoints to prune');
    await ageRuns([agentRunId]);

    const killed = spawnNode('scripts/prune.ts', ['--older-than', '30d'], {
      env: { ...s.env, ECHODO_FAULT: 'after-notes-prune' },
    });
    children.push(killed);
    assert.equal((await killed.exited).signal, 'SIGKILL', killed.output());
    assert.equal(await rowCount(agentRunId), rows.length, 'no row deleted yet');
    assert.equal(await noteBlob(rows[0]!.commit_oid), undefined, "the first checkpoint's note already gone");
    assert.ok(await noteBlob(rows.at(-1)!.commit_oid), "the last checkpoint's note kept");

    const report = await npmPrune();
    assert.equal(report.rowsDeleted, rows.length - 1, 'the next prune deletes the rows');
    assert.equal(report.notesRemoved, 0, 'their notes were gone already');
    const integrity = await checkRunIntegrity(s.t.db, s.config, s.workspaceId, agentRunId);
    assert.equal(integrity?.intact, true, JSON.stringify(integrity?.findings));
  },
);

test('with WORKER_CHECKPOINT_RETENTION_DAYS=30 the stall detector prunes too', { timeout: 60_000 }, async () => {
  const { agentRunId } = await s.dispatch();
  const worker = s.spawnWorker();
  children.push(worker);
  const done = await s.waitForStatus(agentRunId, 'completed');
  await worker.stop('SIGTERM');
  const rows = await s.checkpoints(agentRunId);
  assert.ok(rows.length > 1, 'the run has more than one checkpoint to prune');
  await ageRuns([agentRunId]);

  const detector = spawnNode('scripts/stall-detector.ts', ['--once'], {
    env: { ...s.env, WORKER_CHECKPOINT_RETENTION_DAYS: '30' },
  });
  children.push(detector);
  assert.equal((await detector.exited).code, 0, detector.output());
  assert.deepEqual(
    (await s.checkpoints(agentRunId)).map((r) => r.id),
    [rows.at(-1)!.id],
  );
  const [anchor] = await s.su`select anchor_hash from checkpoint_anchors where agent_run_id = ${agentRunId}`;
  assert.equal(anchor?.anchor_hash, rows.at(-2)!.hash);
  assert.equal(existsSync(done.worktree_path), false, 'its worktree removed');

  // Without the variable the detector leaves retention alone.
  const other = (await s.dispatch()).agentRunId;
  const w2 = s.spawnWorker();
  children.push(w2);
  await s.waitForStatus(other, 'completed');
  await w2.stop('SIGTERM');
  await ageRuns([other]);
  const before = await rowCount(other);
  const plain = spawnNode('scripts/stall-detector.ts', ['--once'], { env: s.env });
  children.push(plain);
  assert.equal((await plain.exited).code, 0);
  assert.equal(await rowCount(other), before, 'no retention without WORKER_CHECKPOINT_RETENTION_DAYS');
});
