// Storage, retention and quota against a real database, a real git repository and real
// Chromium: the Storage page and GET /api/storage show the bytes a known run added (Postgres by
// pg_column_size, git by the objects only its branch holds, each figure the one `git rev-list
// --disk-usage` gives for it directly; a run or convoy whose branches are gone is unknown, never 0);
// `retention set` through the CLI,
// then the stall detector's storage sweep, prunes the run to its last K checkpoints (the chain
// still verifies, the bytes fall); `quota set` over the measured bytes refuses a new run at
// dispatch with the reason.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import type { Browser } from 'playwright-core';
import type { Sql } from 'postgres';
import { createMissionControl, type RunningMissionControl } from '../mission-control/server.ts';
import { dispatchJob } from '../operator/dispatch.ts';
import { sweepStoragePolicies } from '../operator/storage-sweep.ts';
import { createWorkspace } from '../store/runs.ts';
import { createWorkspaceToken } from '../store/tokens.ts';
import { withWorkspace } from '../store/workspace.ts';
import { checkpointHash } from '../core/checkpoint-hash.ts';
import { createLogger } from '../worker/log.ts';
import type { JobQueue } from '../worker/queue/types.ts';
import { spawnNode } from './support/child.ts';
import { createTestDatabase, superuserSql, type TestDatabase } from '../testbed/db.ts';
import { launchChromium, signInAt } from './support/browser.ts';

const WS = 'storage';
const RUN = 'run-big';
const SMALL = 'run-small';
const MID = 'run-mid';
const GONE = 'run-gone';
const BLOB_BYTES = 200_000;

let t: TestDatabase;
let su: Sql;
let server: RunningMissionControl;
let browser: Browser;
let token = '';
let repo = '';
const sweep = () =>
  sweepStoragePolicies({
    db: t.db,
    log: createLogger({ level: 'silent', name: 'test' }),
    repoRoot: repo,
    notesRef: t.config.WORKER_NOTES_REF,
  });
const git = (...args: string[]) => execFileSync('git', ['-C', repo, ...args], { encoding: 'utf8' }).trim();

/** A finished run with `count` chained checkpoints on `branch` of the test repository. */
async function seedRun(runId: string, count: number, branch: string, baseOid: string, convoy = 'convoy-s') {
  const brief = 'brief-' + runId;
  await su`insert into briefs (workspace_id, id, convoy_id, role_id) values (${WS}, ${brief}, ${convoy}, 'coder')`;
  await su`insert into agent_runs (workspace_id, id, convoy_id, brief_id, job_id, job, harness_alias, status, branch,
             base_oid, created_at, finished_at)
           values (${WS}, ${runId}, ${convoy}, ${brief}, ${'job-' + runId}, ${su.json({ brief: 'b', repoPath: repo })},
                   'code', 'completed', ${branch}, ${baseOid}, now() - interval '2 days', now() - interval '1 day')`;
  let prev: string | null = null;
  for (let seq = 1; seq <= count; seq++) {
    const toolHistory = [{ round: seq, tool: 'write_file', input: { path: 'x', content: 'y'.repeat(2000) }, ok: true }];
    const filesTouched = [{ path: `f${seq}`, sha256: 'b'.repeat(64), bytes: 1, deleted: false }];
    const payload = {
      workspaceId: WS,
      agentRunId: runId,
      checkpointSeq: seq,
      step: seq,
      toolHistory,
      filesTouched,
      branch,
      worktreePath: null,
      commitOid: null,
    };
    const hash = checkpointHash(prev, payload);
    await su`insert into worker_checkpoints (workspace_id, agent_run_id, convoy_id, brief_id, checkpoint_seq, step, attempt,
               lease_epoch, tool_history, files_touched, branch, worktree_path, commit_oid, prev_hash, hash)
             values (${WS}, ${runId}, ${convoy}, ${'brief-' + runId}, ${seq}, ${seq}, 1, 1, ${su.json(toolHistory)},
                     ${su.json(filesTouched)}, ${branch}, null, null, ${prev}, ${hash})`;
    prev = hash;
  }
}

before(async () => {
  t = await createTestDatabase();
  su = superuserSql(t.url);
  repo = mkdtempSync(path.join(tmpdir(), 'echodo-storage-'));
  git('init', '-q', '-b', 'main');
  git('-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-q', '--allow-empty', '-m', 'base');
  const base = git('rev-parse', 'HEAD');
  git('checkout', '-q', '-b', 'echodo/big');
  writeFileSync(path.join(repo, 'blob.bin'), randomBytes(BLOB_BYTES)); // incompressible: its bytes are its size
  git('add', 'blob.bin');
  git('-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-q', '-m', 'big');
  // A second branch of the convoy, holding the big blob too (counted once for the convoy) and one of its own.
  git('checkout', '-q', '-b', 'echodo/mid');
  writeFileSync(path.join(repo, 'mid.bin'), randomBytes(5_000));
  git('add', 'mid.bin');
  git('-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-q', '-m', 'mid');
  // A run of its own convoy whose branch was deleted since.
  git('checkout', '-q', '-b', 'echodo/gone', 'main');
  git('-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-q', '--allow-empty', '-m', 'gone');
  git('checkout', '-q', 'main');
  git('branch', '-q', '-D', 'echodo/gone');
  await withWorkspace(t.db.app, WS, (tx) => createWorkspace(tx));
  await su`insert into convoys (workspace_id, id) values (${WS}, 'convoy-s'), (${WS}, 'convoy-gone')`;
  await seedRun(RUN, 12, 'echodo/big', base);
  await seedRun(SMALL, 1, 'echodo/none', base);
  await seedRun(MID, 1, 'echodo/mid', base);
  await seedRun(GONE, 1, 'echodo/gone', base, 'convoy-gone');
  token = await createWorkspaceToken(t.db.app, WS);
  server = await createMissionControl({ db: t.db, config: { ...t.config, LOG_LEVEL: 'silent' } }).start(0);
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
  await server?.close();
  await su?.end();
  await t?.drop();
  if (repo) rmSync(repo, { recursive: true, force: true });
});

interface StorageJson {
  postgresBytes: number;
  gitBytes: number | null;
  convoys: { convoyId: string; bytes: number; gitBytes: number | null }[];
  runs: { agentRunId: string; postgresBytes: number; gitBytes: number | null; checkpointRows: number }[];
}
const storage = async (): Promise<StorageJson> =>
  (await (
    await fetch(`${server.url}/api/storage`, { headers: { authorization: `Bearer ${token}` } })
  ).json()) as StorageJson;

async function runPostgresBytes(runId: string): Promise<number> {
  const [row] =
    await su`select (select coalesce(sum(pg_column_size(c.*)), 0) from worker_checkpoints c where c.agent_run_id = ${runId})
                              + (select coalesce(sum(pg_column_size(e.*)), 0) from convoy_events e where e.agent_run_id = ${runId}) as n`;
  return Number(row!.n);
}

/** The estimate computed directly, one rev-list for these branches less the base; null when git refuses. */
function directGitBytes(branches: string[]): number | null {
  const base = git('rev-parse', 'main');
  try {
    return Number(
      git('rev-list', '--disk-usage', '--objects', ...branches.map((b) => `refs/heads/${b}`), '--not', base),
    );
  } catch {
    return null;
  }
}

test('GET /api/storage and the Storage page show the bytes a known run holds, largest first', async () => {
  const body = await storage();
  const gitOf = (id: string) => body.runs.find((r) => r.agentRunId === id)!.gitBytes;
  assert.equal(body.runs[0]!.agentRunId, RUN, 'the largest run first');
  assert.equal(body.runs[0]!.postgresBytes, await runPostgresBytes(RUN));
  assert.ok(gitOf(RUN)! >= BLOB_BYTES, `git bytes ${gitOf(RUN)} hold the ${BLOB_BYTES}-byte blob`);
  // Each figure is what rev-list says of that branch alone (the old per-run process, now batched).
  assert.deepEqual(
    [RUN, MID, SMALL, GONE].map(gitOf),
    [directGitBytes(['echodo/big']), directGitBytes(['echodo/mid']), null, null],
    'per run: the direct estimate; a branch that is not there (never made, or deleted) is unknown, not 0',
  );
  assert.ok(gitOf(MID)! > gitOf(RUN)!, 'the mid branch holds the big blob too');
  assert.equal(body.gitBytes, gitOf(RUN)! + gitOf(MID)!, 'the total adds the known runs');
  assert.equal((await fetch(`${server.url}/api/storage`)).status, 401);

  const page = await browser.newPage({ viewport: { width: 390, height: 800 } });
  await page.goto(`${server.url}/login?next=%2Fstorage`);
  await page.fill('#token', token);
  await Promise.all([page.waitForURL(`${server.url}/storage`), page.click('button[type=submit]')]);
  const row = page.locator(`[data-testid="storage-runs"] tr[data-run-id="${RUN}"]`);
  assert.equal(
    await row.locator('[data-field="postgresBytes"]').getAttribute('data-bytes'),
    String(body.runs[0]!.postgresBytes),
  );
  assert.equal(await row.locator('[data-field="gitBytes"]').getAttribute('data-bytes'), String(body.runs[0]!.gitBytes));
  const gone = page.locator(`[data-testid="storage-runs"] tr[data-run-id="${GONE}"] [data-field="gitBytes"]`);
  assert.equal((await gone.innerText()).trim(), '—', 'a run whose branch is gone shows —, not 0 B');
  assert.ok((await page.evaluate(() => document.documentElement.scrollWidth)) <= 390, 'fits a 390 px screen');
  // Per convoy: its checkpoint rows and events (those of its runs) and its runs' branches in git, each object once.
  const convoyBytes = (await runPostgresBytes(RUN)) + (await runPostgresBytes(SMALL)) + (await runPostgresBytes(MID));
  const convoyRow = page.locator('[data-testid="storage-convoys"] tr[data-convoy-id="convoy-s"]');
  assert.equal(await convoyRow.locator('[data-field="postgresBytes"]').getAttribute('data-bytes'), String(convoyBytes));
  const convoyGit = directGitBytes(['echodo/big', 'echodo/mid']);
  assert.ok(convoyGit! < gitOf(RUN)! + gitOf(MID)!, 'the blob the two branches share counts once');
  assert.equal(await convoyRow.locator('[data-field="gitBytes"]').getAttribute('data-bytes'), String(convoyGit));
  const goneConvoy = page.locator('[data-testid="storage-convoys"] tr[data-convoy-id="convoy-gone"]');
  assert.equal((await goneConvoy.locator('[data-field="gitBytes"]').innerText()).trim(), '—');
  assert.deepEqual(
    body.convoys.map((c) => [c.convoyId, c.bytes, c.gitBytes]),
    [
      ['convoy-s', convoyBytes, convoyGit],
      ['convoy-gone', await runPostgresBytes(GONE), null],
    ],
  );
  await page.close();

  // A figure kept from the last load is measured again once a tip moves or the objects are repacked.
  git('checkout', '-q', 'echodo/mid');
  writeFileSync(path.join(repo, 'more.bin'), randomBytes(3_000));
  git('add', 'more.bin');
  git('-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-q', '-m', 'more');
  git('checkout', '-q', 'main');
  const loose = directGitBytes(['echodo/mid']);
  assert.ok(loose! > gitOf(MID)!);
  assert.equal((await storage()).runs.find((r) => r.agentRunId === MID)!.gitBytes, loose, 'the new tip is measured');
  git('repack', '-q', '-a', '-d');
  const packed = directGitBytes(['echodo/mid']);
  assert.notEqual(packed, loose, 'packed, the same objects take other bytes');
  assert.equal((await storage()).runs.find((r) => r.agentRunId === MID)!.gitBytes, packed, 'the repack is seen');
});

test('retention set (CLI) is applied by the storage sweep: the run keeps its first and last K checkpoints, still verifies, bytes fall', async () => {
  const before = await runPostgresBytes(RUN);
  const cli = spawnNode(
    'scripts/workspace.ts',
    ['retention', 'set', '--workspace', WS, '--keep-last', '3', '--keep-days', '0'],
    { env: { ...t.env, LOG_LEVEL: 'warn' } },
  );
  assert.equal((await cli.exited).code, 0, cli.output());
  const bad = spawnNode('scripts/workspace.ts', ['retention', 'set', '--workspace', WS, '--keep-last', 'many'], {
    env: { ...t.env },
  });
  assert.equal((await bad.exited).code, 2, 'a bad number is a usage error');

  const swept = await sweep();
  assert.deepEqual(
    swept.workspaces.map((w) => [w.workspaceId, w.rowsPruned]),
    [[WS, 8]],
  );
  const seqs =
    await su`select checkpoint_seq from worker_checkpoints where agent_run_id = ${RUN} order by checkpoint_seq`;
  assert.deepEqual(
    seqs.map((r) => r.checkpoint_seq),
    [1, 10, 11, 12],
  );
  assert.ok((await runPostgresBytes(RUN)) < before / 2, 'the bytes fell');
  assert.equal((await storage()).runs.find((r) => r.agentRunId === RUN)!.checkpointRows, 4);
  const run = await (
    await fetch(`${server.url}/api/runs/${RUN}`, { headers: { authorization: `Bearer ${token}` } })
  ).json();
  assert.deepEqual(run.chain, { verdict: 'verifies' }, 'the chain verifies from the anchor the prune kept');
});

test("a workspace over its quota: dispatch and the panel's Retry refuse a new run with the reason", async () => {
  const cli = spawnNode('scripts/workspace.ts', ['quota', 'set', '--workspace', WS, '--bytes', '1000'], {
    env: { ...t.env, LOG_LEVEL: 'warn' },
  });
  assert.equal((await cli.exited).code, 0, cli.output());
  await sweep();
  const queue = { enqueue: async () => {} } as unknown as JobQueue;
  const job = {
    workspaceId: WS,
    convoyId: 'convoy-s',
    briefId: 'brief-new',
    roleId: 'coder',
    harnessAlias: 'code',
    baseRef: 'main',
    brief: 'One more.',
    model: 'replay:/tmp/none.json',
  };
  await assert.rejects(dispatchJob(t.db, queue, job), (err: Error & { code?: string }) => {
    assert.equal(err.code, 'action_refused');
    assert.match(err.message, /over its storage quota: \d+ bytes used \(\d+ in Postgres, \d+ in git\) of 1000 allowed/);
    return true;
  });
  // In the panel: the Storage page says so, and Retry of a failed run is refused with the reason.
  await su`update agent_runs set status = 'failed' where id = ${SMALL}`;
  const page = await browser.newPage({ viewport: { width: 390, height: 844 } });
  await signInAt(page, server.url, token);
  await page.goto(`${server.url}/storage`);
  assert.match(await page.locator('[data-testid="over-quota"]').innerText(), /over quota: no run starts/);
  await page.goto(`${server.url}/runs/${SMALL}`);
  await page.click('[data-testid="retry"]');
  if (await page.locator('[data-testid="confirm-yes"]').count()) await page.click('[data-testid="confirm-yes"]');
  await page.waitForSelector('text=retry refused');
  assert.match(await page.locator('main').innerText(), /over its storage quota: \d+ bytes used .* of 1000 allowed/);
  assert.equal((await su`select status from agent_runs where id = ${SMALL}`)[0]!.status, 'failed', 'nothing started');
  await page.close();
  await withWorkspace(t.db.app, WS, (tx) => tx`update workspace_storage_policies set quota_bytes = 1e12`);
  await sweep();
  const admitted = await dispatchJob(t.db, queue, job);
  assert.ok(admitted.agentRunId, 'under the quota again, the run is admitted');
});

test('Prune now on the Storage page previews what goes, asks, then applies the policy', async () => {
  const [{ oid }] = (await su`select base_oid as oid from agent_runs where id = ${RUN}`) as unknown as [
    { oid: string },
  ];
  await seedRun('run-extra', 7, 'echodo/extra', oid);
  const page = await browser.newPage();
  // Runs that finished within the last D days are kept whole: these finished a day ago.
  await su`update workspace_storage_policies set keep_days = 2 where workspace_id = ${WS}`;
  await page.goto(`${server.url}/login?next=%2Fstorage`);
  await page.fill('#token', token);
  await Promise.all([page.waitForURL(`${server.url}/storage`), page.click('button[type=submit]')]);
  assert.equal(await page.getAttribute('[data-testid="prune-preview"]', 'data-rows'), '0', 'kept for 2 days');
  await su`update workspace_storage_policies set keep_days = 0 where workspace_id = ${WS}`;
  await page.reload();
  assert.equal(
    await page.getAttribute('[data-testid="prune-preview"]', 'data-rows'),
    '3',
    'keep-last 3 of 7: 3 would go (the first stays)',
  );
  const [going] = await su`select sum(pg_column_size(c.*))::int as n from worker_checkpoints c
                            where agent_run_id = 'run-extra' and checkpoint_seq between 2 and 4`;
  assert.equal(await page.getAttribute('[data-testid="prune-preview"]', 'data-bytes'), String(going!.n));
  await page.click('[data-testid="prune-now"]');
  await page.waitForSelector('[data-testid="confirm"]');
  assert.match(await page.locator('[data-testid="confirm"]').innerText(), /removes 3 checkpoints of 1 runs/);
  const [still] = await su`select count(*)::int as n from worker_checkpoints where agent_run_id = 'run-extra'`;
  assert.equal(still!.n, 7, 'nothing goes before the confirmation');
  await Promise.all([page.waitForURL(`${server.url}/storage`), page.click('[data-testid="confirm-yes"]')]);
  const [left] = await su`select count(*)::int as n from worker_checkpoints where agent_run_id = 'run-extra'`;
  assert.equal(left!.n, 4);
  assert.equal(await page.getAttribute('[data-testid="prune-preview"]', 'data-rows'), '0');
  await page.close();
});
