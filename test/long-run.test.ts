// A 500-checkpoint run: each checkpoint stores what changed, not everything so far.
// Driven through the real CheckpointWriter (real Postgres, real git worktree, notes, packing);
// resume at the end goes through the real verification (verifyAndRepair / integrity-check).
import assert from 'node:assert/strict';
import { appendFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { checkpointChain, runManifest } from '../store/checkpoints.ts';
import { createWorkspace, getRun } from '../store/runs.ts';
import { withWorkspace } from '../store/workspace.ts';
import { verifyChain } from '../core/checkpoint-hash.ts';
import { notedCommits } from '../worker/checkpoints/notes.ts';
import { checkRunIntegrity } from '../operator/integrity.ts';
import { verifyAndRepair } from '../worker/checkpoints/resume.ts';
import { loadResumeChain } from '../worker/checkpoints/resume-chain.ts';
import { historyWindow } from '../worker/checkpoints/state.ts';
import { createTestDatabase, superuserSql, type TestDatabase } from '../testbed/db.ts';
import { git, makeRepo } from './support/git.ts';
import { looseObjects, silentLog, startDrivenRun, treeManifest, type DrivenRun } from './support/checkpoint-run.ts';

// 500; LONG_RUN_CHECKPOINTS (at least 60) shortens it for a quick local look.
const CHECKPOINTS = Math.max(60, Number(process.env.LONG_RUN_CHECKPOINTS ?? 500));
const PACK_EVERY = 16;
let t: TestDatabase;
let repo: string;
let r: DrivenRun;
const rowBytes = new Map<number, number>();

// 500 checkpoints took 242 s on the shared 2-core VM at a load average of ~10 (five git and two
// SQL round trips each); the timeout leaves room for a loaded machine.
before(
  async () => {
    t = await createTestDatabase();
    await withWorkspace(t.db.app, 'acme', (tx) => createWorkspace(tx));
    const files: Record<string, string> = { 'README.md': '# long run\n' };
    for (let i = 0; i < 40; i++) files[`src/mod-${i}.ts`] = `export const m${i} = 0;\n`;
    repo = await makeRepo(files);
    r = await startDrivenRun({ db: t.db, config: t.config, workspaceId: 'acme', repo, packEvery: PACK_EVERY });
    const started = performance.now();
    // Every round changes exactly 3 files: two of 40 rotating modules and one new file. Round 3
    // also writes a file nobody touches again; round 7 deletes the README.
    for (let seq = 1; seq <= CHECKPOINTS; seq++) {
      const write: Record<string, string> = {
        [`src/mod-${seq % 40}.ts`]: `export const m${seq % 40} = ${seq};\n`,
        [`src/mod-${(seq + 17) % 40}.ts`]: `export const m${(seq + 17) % 40} = ${seq};\n`,
        [seq === 3 ? 'src/only-at-3.ts' : `src/new/n-${seq}.ts`]: `export const n = ${seq};\n`,
      };
      if (seq === 7) {
        delete write[`src/new/n-${seq}.ts`];
        await r.round(write, ['README.md']);
      } else await r.round(write);
    }
    await r.writer.settleNotes();
    console.log(`${CHECKPOINTS} checkpoints in ${Math.round(performance.now() - started)} ms`);
  },
  { timeout: 900_000 },
);
after(async () => {
  await t?.drop();
});

test('every row holds its own 3 files and tool calls: the row at 500 is within 1.5x of the row at 60', async () => {
  const su = superuserSql(t.url);
  try {
    const rows = await su<{ seq: number; bytes: number; files: number; calls: number; format: number }[]>`
      select checkpoint_seq as seq, pg_column_size(c.*) as bytes, jsonb_array_length(files_touched) as files,
             jsonb_array_length(tool_history) as calls, payload_format as format
        from worker_checkpoints c where agent_run_id = ${r.run.id} order by checkpoint_seq`;
    assert.equal(rows.length, CHECKPOINTS, 'one row per checkpoint');
    for (const row of rows) rowBytes.set(row.seq, row.bytes);
    assert.ok(
      rows.every((row) => row.format === 3),
      'every row is a delta row',
    );
    assert.ok(
      rows.every((row) => row.files === 3),
      'every row names exactly the 3 files it changed',
    );
    assert.ok(
      rows.every((row) => row.calls === 3),
      "every row holds its own round's 3 tool calls, once",
    );
    const at60 = rowBytes.get(60)!;
    const at500 = rowBytes.get(CHECKPOINTS)!;
    assert.ok(at500 <= 1.5 * at60, `row ${CHECKPOINTS} is ${at500} bytes, row 60 ${at60}: within 1.5x`);
    const [{ manifest }] = await su<
      { manifest: number }[]
    >`select count(*)::int as manifest from checkpoint_manifest where agent_run_id = ${r.run.id}`;
    assert.equal(manifest, 40 + 1 + 1 + (CHECKPOINTS - 2), 'the manifest has one row per path the run touched');
  } finally {
    await su.end({ timeout: 1 });
  }
});

test('the manifest from the rows equals the branch tip tree for every touched path; notes and packs are in place', async () => {
  const manifest = await withWorkspace(t.db.app, 'acme', (tx) => runManifest(tx, r.run.id));
  const tree = await treeManifest(repo, `refs/heads/${r.branch}`);
  assert.equal(manifest.length, 40 + 1 + 1 + (CHECKPOINTS - 2));
  for (const m of manifest) {
    if (m.sha256 === null)
      assert.equal(tree.has(m.path), false, `${m.path} was deleted by the run and is not in the tree`);
    else assert.equal(tree.get(m.path), m.sha256, `${m.path}: the manifest's sha256 is the tree's content`);
  }
  assert.equal(
    manifest.find((m) => m.path === 'src/only-at-3.ts')?.seq,
    3,
    'the manifest says which checkpoint last changed a path',
  );
  assert.equal(manifest.find((m) => m.path === 'README.md')?.sha256, null, 'a deletion is in the manifest');

  const chain = await withWorkspace(t.db.app, 'acme', (tx) => checkpointChain(tx, r.run.id));
  const verdict = verifyChain(chain, null);
  assert.ok(verdict.ok, verdict.problems.join('; '));
  const noted = await notedCommits(repo, t.config.WORKER_NOTES_REF);
  assert.ok(
    chain.every((row) => noted.has(row.commit_oid!)),
    'every checkpoint commit carries its note',
  );
  const note = JSON.parse(
    await git(repo, 'notes', `--ref=${t.config.WORKER_NOTES_REF}`, 'show', chain.at(-1)!.commit_oid!),
  );
  assert.equal(note.files.length, 3, "the note holds only its checkpoint's files");
  assert.equal(note.manifestDigest, chain.at(-1)!.manifest_digest, "and the run's manifest digest");
  assert.equal(note.treeOid, await git(repo, 'rev-parse', `${chain.at(-1)!.commit_oid}^{tree}`));
  const loose = await looseObjects(repo);
  assert.ok(
    loose <= 30 * PACK_EVERY,
    `${loose} loose objects left after ${CHECKPOINTS} checkpoints (packed every ${PACK_EVERY})`,
  );
  const packs = (await git(repo, 'count-objects', '-v')).match(/^packs: (\d+)/m)![1];
  assert.ok(Number(packs) <= 2, `${packs} packs: rolled up geometrically, then consolidated when the run settled`);
});

test('integrity-check is intact and lists the whole manifest; resume at 500 verifies every touched file', async () => {
  const report = await checkRunIntegrity(t.db, t.config, 'acme', r.run.id);
  assert.ok(report, 'the run is found');
  assert.deepEqual(report.findings, [], 'intact');
  assert.equal(report.manifest.length, 40 + 1 + 1 + (CHECKPOINTS - 2), 'integrity-check reports the whole manifest');

  // A file written at checkpoint 3 and never again: only the manifest still names it.
  await appendFile(path.join(r.worktree, 'src/only-at-3.ts'), '// tampered\n');
  const drift = await checkRunIntegrity(t.db, t.config, 'acme', r.run.id);
  assert.ok(
    drift!.findings.some((f) => f.kind === 'file_changed' && f.detail.includes('src/only-at-3.ts')),
    JSON.stringify(drift!.findings),
  );

  // What a resume reads (worker/run/execute.ts): a bounded tail of rows, anchored at the row before it.
  const limit = t.config.WORKER_CHECKPOINT_HISTORY_LIMIT;
  const { partial, ...loaded } = await withWorkspace(t.db.app, 'acme', async (tx) => ({
    run: (await getRun(tx, r.run.id))!,
    ...(await loadResumeChain(tx, r.run.id, limit)),
    manifest: await runManifest(tx, r.run.id),
  }));
  const whole = await withWorkspace(t.db.app, 'acme', (tx) => checkpointChain(tx, r.run.id));
  assert.equal(partial, true, 'a resume of a long run reads only its tail');
  assert.equal(loaded.chain.length, 2 * limit + 1, 'the tail is bounded by the history window, not the run');
  assert.equal(loaded.chain.at(-1)!.checkpoint_seq, CHECKPOINTS);
  assert.equal(
    loaded.anchor,
    whole.at(-loaded.chain.length - 1)!.hash,
    'anchored at the hash of the row before the tail',
  );
  assert.deepEqual(
    historyWindow(loaded.chain, limit),
    historyWindow(whole, limit),
    'the tail rebuilds the same history window',
  );
  const resumed = await verifyAndRepair({
    ...loaded,
    repoRoot: repo,
    worktreeBase: t.config.WORKER_WORKTREE_BASE,
    notesRef: t.config.WORKER_NOTES_REF,
    log: silentLog,
  });
  assert.equal(resumed.fromSeq, CHECKPOINTS);
  assert.ok(
    resumed.findings.some((f) => f.kind === 'file_changed' && f.detail.includes('src/only-at-3.ts')),
    'resume found the tampered file',
  );
  assert.ok(
    resumed.repairs.some((x) => x.includes('reset the worktree')),
    resumed.repairs.join('; '),
  );
  const after = await checkRunIntegrity(t.db, t.config, 'acme', r.run.id);
  assert.deepEqual(after!.findings, [], 'intact after the repair');

  // A manifest row edited behind the chain's back is caught by the digest.
  const su = superuserSql(t.url);
  try {
    await su`update checkpoint_manifest set sha256 = decode(repeat('ab', 32), 'hex') where agent_run_id = ${r.run.id} and path = 'src/mod-1.ts'`;
  } finally {
    await su.end({ timeout: 1 });
  }
  const edited = await checkRunIntegrity(t.db, t.config, 'acme', r.run.id);
  assert.ok(
    edited!.findings.some((f) => f.kind === 'manifest_mismatch'),
    JSON.stringify(edited!.findings),
  );
  const editedResume = await verifyAndRepair({
    ...loaded,
    manifest: await withWorkspace(t.db.app, 'acme', (tx) => runManifest(tx, r.run.id)),
    repoRoot: repo,
    worktreeBase: t.config.WORKER_WORKTREE_BASE,
    notesRef: t.config.WORKER_NOTES_REF,
    log: silentLog,
  }).catch((err: Error) => err);
  assert.ok(
    editedResume instanceof Error && /cannot resume run/.test(editedResume.message),
    'a resume from the tail still checks the whole manifest against the latest row',
  );
});
