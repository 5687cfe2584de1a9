// Migration 008: a run checkpointed in the old cumulative format (every row repeating every
// path so far and the whole history window) is rewritten into deltas, still verifies by its old
// hashes, and resumes after the migration: verification covers every file it ever touched, and
// its next checkpoints are delta rows chained onto the old ones.
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { appendFile, mkdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, test } from 'node:test';
import { commitTouchedPaths } from '../worker/checkpoints/content.ts';
import { checkpointHash, ManifestDigest, verifyChain, type FileTouched } from '../core/checkpoint-hash.ts';
import { boundHistory, recordToolCall, type ToolCallRecord } from '../worker/checkpoints/history.ts';
import { writeCheckpointNotes } from '../worker/checkpoints/notes.ts';
import { TouchTracker } from '../worker/checkpoints/tracker.ts';
import { inspectRun } from '../worker/checkpoints/verify.ts';
import { stateFromChain } from '../worker/checkpoints/state.ts';
import { checkpointWriterFor } from '../worker/checkpoints/writer.ts';
import { Lease } from '../worker/run/lease.ts';
import { verifyAndRepair } from '../worker/checkpoints/resume.ts';
import { checkpointChain, runManifest } from '../store/checkpoints.ts';
import { loadMigrations, migrate } from '../store/migrate.ts';
import { getRun } from '../store/runs.ts';
import { withWorkspace } from '../store/workspace.ts';
import { superuserSql, testServerUrl, withDatabase } from '../testbed/db.ts';
import { git, makeRepo } from './support/git.ts';
import { sha256, silentLog } from './support/checkpoint-run.ts';

const cleanups: Array<() => Promise<void>> = [];
after(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {});
});

const WS = 'acme';
const NOTES_REF = 'refs/notes/echodo-checkpoints';
const OLD_LIMIT = 4; // the history window of the old writer, smaller than the run: windows slide

test('a run checkpointed in the old cumulative format resumes after migration 008', { timeout: 300_000 }, async () => {
  const adminUrl = await testServerUrl();
  const name = `echodo_mig008_${randomBytes(5).toString('hex')}`;
  const admin = superuserSql(adminUrl);
  await admin.unsafe(`create database "${name}"`);
  cleanups.push(async () => {
    await admin.unsafe(`drop database if exists "${name}" with (force)`);
    await admin.end({ timeout: 1 });
  });
  const su = superuserSql(withDatabase(adminUrl, name));
  cleanups.push(() => su.end({ timeout: 1 }));
  await migrate(
    su,
    loadMigrations().filter((m) => m.version < 8),
  );

  // The run, as the old code recorded it.
  const repo = await makeRepo({ 'README.md': '# old\n', 'src/a.ts': 'export const a = 0;\n', 'src/f-2.ts': 'x\n' });
  const runId = randomUUID();
  const branch = `echodo/old-${runId.slice(0, 8)}`;
  const worktree = path.join(path.dirname(repo), `wt-${runId.slice(0, 8)}`);
  cleanups.push(() => rm(worktree, { recursive: true, force: true }));
  await git(repo, 'worktree', 'add', '-q', '-b', branch, worktree, 'main');
  const baseOid = await git(repo, 'rev-parse', 'main');
  const job = {
    workspaceId: WS,
    convoyId: 'c1',
    briefId: 'b1',
    roleId: 'coder',
    harnessAlias: 'code',
    repoPath: repo,
    baseRef: 'main',
    brief: 'old',
    model: 'replay:/dev/null',
    jobId: 'j1',
    agentRunId: runId,
  };
  await su`insert into workspaces (workspace_id) values (${WS})`;
  await su`insert into convoys (workspace_id, id) values (${WS}, 'c1')`;
  await su`insert into briefs (workspace_id, id, convoy_id, role_id) values (${WS}, 'b1', 'c1', 'coder')`;
  await su`insert into agent_runs (id, workspace_id, convoy_id, brief_id, job_id, job, harness_alias, status, lease_epoch, branch, worktree_path, base_oid, step)
           values (${runId}, ${WS}, 'c1', 'b1', 'j1', ${su.json(job)}, 'code', 'running', 1, ${branch}, ${worktree}, ${baseOid}, 0)`;

  // Six checkpoints in the old shape: cumulative files_touched, the bounded window in every row.
  const files = new Map<string, FileTouched>();
  let history: ToolCallRecord[] = [];
  let prevHash: string | null = null;
  let head = baseOid;
  for (let seq = 1; seq <= 6; seq++) {
    const write: Record<string, string> = {
      'src/a.ts': `export const a = ${seq};\n`,
      [`src/f-${seq}.ts`]: `export const f = ${seq};\n`,
    };
    if (seq === 2) write['src/f-2.ts'] = 'export const f = 2;\n';
    const paths = Object.keys(write);
    await mkdir(path.join(worktree, 'src'), { recursive: true });
    for (const [p, c] of Object.entries(write)) {
      await writeFile(path.join(worktree, p), c);
      files.set(p, { path: p, sha256: sha256(c), bytes: Buffer.byteLength(c), deleted: false });
      history.push(
        recordToolCall({
          round: seq,
          tool: 'write_file',
          input: { path: p, content: c },
          output: { path: p, bytes: c.length, sha256: sha256(c) },
        }),
      );
    }
    if (seq === 4) {
      await rm(path.join(worktree, 'src/f-2.ts'));
      paths.push('src/f-2.ts');
      files.set('src/f-2.ts', { path: 'src/f-2.ts', sha256: null, bytes: 0, deleted: true });
    }
    const { commitOid, indexNow } = await commitTouchedPaths({
      worktree,
      branch,
      parentOid: head,
      paths,
      message: `echodo checkpoint ${seq} (run ${runId})`,
    });
    await indexNow(); // as the writer does after the row
    head = commitOid;
    history = boundHistory(history, OLD_LIMIT);
    const filesTouched = [...files.values()].sort((a, b) => (a.path < b.path ? -1 : 1));
    const payload = {
      workspaceId: WS,
      agentRunId: runId,
      checkpointSeq: seq,
      step: seq,
      toolHistory: history,
      filesTouched,
      branch,
      worktreePath: worktree,
      commitOid,
    };
    const hash = checkpointHash(prevHash, payload);
    await su`insert into worker_checkpoints (workspace_id, agent_run_id, convoy_id, brief_id, checkpoint_seq, step, attempt, lease_epoch,
                                             tool_history, files_touched, branch, worktree_path, commit_oid, prev_hash, hash)
             values (${WS}, ${runId}, 'c1', 'b1', ${seq}, ${seq}, 1, 1, ${su.json(history as never)}, ${su.json(filesTouched as never)},
                     ${branch}, ${worktree}, ${commitOid}, ${prevHash}, ${hash})`;
    await writeCheckpointNotes(worktree, NOTES_REF, [
      {
        commitOid,
        note: {
          workspaceId: WS,
          agentRunId: runId,
          checkpointSeq: seq,
          step: seq,
          hash,
          prevHash,
          branch,
          files: filesTouched.map((f) => ({ path: f.path, sha256: f.sha256 })),
        },
      },
    ]);
    prevHash = hash;
  }
  await su`update agent_runs set step = 6 where id = ${runId}`;
  const [before] = await su<
    { bytes: number }[]
  >`select sum(pg_column_size(c.*))::int as bytes from worker_checkpoints c where agent_run_id = ${runId}`;

  // ------------------------------------------------------------------ migrate
  await migrate(su);
  const read = <T>(fn: Parameters<typeof withWorkspace<T>>[2]) => withWorkspace<T>(su, WS, fn);
  const chain = await read((tx) => checkpointChain(tx, runId));
  const manifest = await read((tx) => runManifest(tx, runId));
  assert.deepEqual(
    chain.map((r) => r.payload_format),
    [2, 2, 2, 2, 2, 1],
    'rows become deltas; the latest stays whole (pruning may keep it alone)',
  );
  assert.deepEqual(
    chain[2]!.files_touched.map((f) => f.path),
    ['src/a.ts', 'src/f-3.ts'],
    'row 3 names only its own files',
  );
  assert.deepEqual(
    chain[3]!.files_touched.map((f) => [f.path, f.deleted]),
    [
      ['src/a.ts', false],
      ['src/f-2.ts', true],
      ['src/f-4.ts', false],
    ],
    'row 4 names its deletion',
  );
  assert.deepEqual(
    (chain[4]!.tool_history as ToolCallRecord[]).map((h) => h.round),
    [5, 5],
    'row 5 holds its own round once',
  );
  const [afterBytes] = await su<
    { bytes: number }[]
  >`select sum(pg_column_size(c.*))::int as bytes from worker_checkpoints c where agent_run_id = ${runId}`;
  assert.ok(afterBytes!.bytes < before!.bytes, `the rows shrank (${before!.bytes} → ${afterBytes!.bytes} bytes)`);
  const verdict = verifyChain(chain, null);
  assert.ok(verdict.ok, `the old hashes still verify: ${verdict.problems.join('; ')}`);
  assert.deepEqual(
    manifest.map((m) => [m.path, m.sha256]),
    [...files.values()].sort((a, b) => (a.path < b.path ? -1 : 1)).map((f) => [f.path, f.sha256]),
    'the manifest is the old cumulative list',
  );
  assert.equal(
    verdict.manifestDigest,
    ManifestDigest.of(manifest).hex(),
    'and matches the digest the old rows vouch for',
  );

  // A tampered migrated row is still caught.
  const tampered = chain.map((r) =>
    r.checkpoint_seq === 3 ? { ...r, files_touched: [{ path: 'src/a.ts', sha256: 'f'.repeat(64) }] } : r,
  );
  assert.equal(verifyChain(tampered, null).ok, false, 'an edited migrated row breaks the chain');

  // ------------------------------------------------------------------ resume
  const run = (await read((tx) => getRun(tx, runId)))!;
  const config = { repoRoot: repo, worktreeBase: path.dirname(worktree), notesRef: NOTES_REF };
  const clean = await inspectRun({ run, chain, anchor: null, manifest, repoRoot: repo, notesRef: NOTES_REF });
  assert.deepEqual(clean.findings, [], 'intact after the migration');

  const state = stateFromChain(chain, baseOid, 50, manifest);
  assert.deepEqual(
    state.history.map((h) => h.round),
    [3, 3, 4, 4, 5, 5, 6, 6],
    'the model sees the same window as before the migration',
  );
  const lease = new Lease(su, WS, runId, 1, { heartbeatMs: 1000, leaseMs: 3_600_000, log: silentLog });
  const tracker = new TouchTracker(worktree);
  const identity = { workspaceId: WS, agentRunId: runId, convoyId: 'c1', briefId: 'b1', attempt: 1 };
  const limits = { WORKER_NOTES_REF: NOTES_REF, WORKER_CHECKPOINT_HISTORY_LIMIT: 50, WORKER_LEASE_MS: 3_600_000 };
  const writer = checkpointWriterFor(
    limits,
    {
      sql: su,
      run: identity,
      lease,
      tree: { root: worktree, git: { branch, worktreePath: worktree } },
      tracker,
      log: silentLog,
    },
    state,
  );
  for (let seq = 7; seq <= 8; seq++) {
    await writeFile(path.join(worktree, 'src/a.ts'), `export const a = ${seq};\n`);
    tracker.note('src/a.ts');
    state.step = seq;
    state.history.push(
      recordToolCall({ round: seq, tool: 'write_file', input: { path: 'src/a.ts', content: 'x' }, output: {} }),
    );
    await writer.write();
  }
  await writer.settleNotes();

  const chain2 = await read((tx) => checkpointChain(tx, runId));
  const manifest2 = await read((tx) => runManifest(tx, runId));
  assert.deepEqual(
    chain2.map((r) => r.payload_format),
    [2, 2, 2, 2, 2, 1, 3, 3],
  );
  assert.deepEqual(
    chain2[7]!.files_touched.map((f) => f.path),
    ['src/a.ts'],
    'the new rows are deltas',
  );
  assert.ok(verifyChain(chain2, null).ok, 'old and new rows verify as one chain');
  const resumed = await inspectRun({
    run,
    chain: chain2,
    anchor: null,
    manifest: manifest2,
    repoRoot: repo,
    notesRef: NOTES_REF,
  });
  assert.deepEqual(resumed.findings, [], 'intact after two new checkpoints');

  // A file written only at checkpoint 1 is still verified at checkpoint 8.
  await appendFile(path.join(worktree, 'src/f-1.ts'), '// edited\n');
  const report = await verifyAndRepair({
    run,
    chain: chain2,
    anchor: null,
    manifest: manifest2,
    ...config,
    log: silentLog,
  });
  assert.ok(
    report.findings.some((f) => f.kind === 'file_changed' && f.detail.includes('src/f-1.ts')),
    JSON.stringify(report.findings),
  );
  assert.equal(await git(worktree, 'status', '--porcelain'), '', 'resume reset the worktree to checkpoint 8');
});
