// The operator panel in real Chromium: sign in with a token, open a convoy, read its
// checkpoint count and last checkpoint time, then watch them change in place (no reload)
// when a worker writes another checkpoint. Screenshots go to test-output/mission-control/.
import assert from 'node:assert/strict';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { after, before, test } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { createMissionControl, type RunningMissionControl } from '../mission-control/server.ts';
import { appendEvent, claimRun, completeRun, createWorkspace, recordRun, requeueRun } from '../store/runs.ts';
import { createWorkspaceToken } from '../store/tokens.ts';
import { withWorkspace } from '../store/workspace.ts';
import { checkpointHash, type FileTouched } from '../core/checkpoint-hash.ts';
import { PROJECT_ROOT } from '../core/config.ts';
import { parseJob } from '../core/job.ts';
import { createTestDatabase, superuserSql, type TestDatabase } from '../testbed/db.ts';
import { launchChromium } from './support/browser.ts';

const WS = 'acme';
const CONVOY = 'convoy-1';
const OUTPUT = path.resolve(PROJECT_ROOT, process.env.ECHODO_TEST_OUTPUT ?? 'test-output', 'mission-control');

let t: TestDatabase;
let server: RunningMissionControl;
let browser: Browser;
let token = '';
const runs = { coder: '', reviewer: '', docs: '' };

async function recordAndClaim(briefId: string, roleId: string, workerId: string | null): Promise<string> {
  return withWorkspace(t.db.app, WS, async (tx) => {
    await createWorkspace(tx);
    const parsed = parseJob({
      jobId: `job-${briefId}`,
      workspaceId: WS,
      convoyId: CONVOY,
      briefId,
      roleId,
      harnessAlias: 'code',
      baseRef: 'main',
      brief: 'Add a greeting module and a test for it.',
      model: 'replay:/tmp/none.json',
    });
    if (!parsed.ok) throw new Error(parsed.problems.join('; '));
    const { agentRunId } = await recordRun(tx, parsed.job);
    if (workerId) await claimRun(tx, { agentRunId, workerId, leaseMs: 600_000 });
    return agentRunId;
  });
}

const ROUNDS: { tools: string[]; file: string }[] = [
  { tools: ['read_file'], file: 'package.json' },
  { tools: ['write_file'], file: 'src/greet.ts' },
  { tools: ['write_file', 'run_command'], file: 'test/greet.test.ts' },
  { tools: ['grep'], file: 'src/index.ts' },
  { tools: ['write_file', 'run_command'], file: 'src/index.ts' },
];

/** Writes the run's next checkpoint as the worker does: next seq and step, linked into the hash chain. */
async function addCheckpoint(agentRunId: string, secondsAgo?: number): Promise<{ count: number; occurredAt: Date }> {
  await withWorkspace(t.db.app, WS, async (tx) => {
    const [run] =
      await tx`select convoy_id, brief_id, attempt, lease_epoch, branch from agent_runs where id = ${agentRunId}`;
    const [prev] = await tx`select checkpoint_seq, hash, tool_history from worker_checkpoints
                             where agent_run_id = ${agentRunId} order by checkpoint_seq desc limit 1`;
    const seq: number = (prev?.checkpoint_seq ?? 0) + 1;
    const round = ROUNDS[(seq - 1) % ROUNDS.length]!;
    const filesTouched: FileTouched[] = [
      { path: round.file, sha256: `${seq}`.padEnd(64, 'e'), bytes: 120 + seq, deleted: false },
    ];
    const toolHistory = [
      ...(prev?.tool_history ?? []),
      ...round.tools.map((tool) => ({ round: seq, tool, input: { path: round.file }, result: 'ok' })),
    ];
    const commitOid = `${seq}`.padStart(40, 'a');
    const branch = `echodo/${run!.brief_id}-${agentRunId.slice(0, 8)}`;
    const payload = {
      workspaceId: WS,
      agentRunId,
      checkpointSeq: seq,
      step: seq,
      toolHistory,
      filesTouched,
      branch,
      worktreePath: null,
      commitOid,
    };
    const occurredAt = secondsAgo === undefined ? tx`now()` : tx`now() - make_interval(secs => ${secondsAgo})`;
    await tx`insert into worker_checkpoints (workspace_id, agent_run_id, convoy_id, brief_id, checkpoint_seq, step, attempt,
               lease_epoch, tool_history, files_touched, branch, worktree_path, commit_oid, prev_hash, hash, occurred_at)
             values (${WS}, ${agentRunId}, ${run!.convoy_id}, ${run!.brief_id}, ${seq}, ${seq}, ${run!.attempt}, ${run!.lease_epoch},
               ${tx.json(toolHistory)}, ${tx.json(filesTouched as never)}, ${branch}, null, ${commitOid},
               ${prev?.hash ?? null}, ${checkpointHash(prev?.hash ?? null, payload)}, ${occurredAt})`;
    await tx`update agent_runs set step = ${seq}, branch = ${branch}, heartbeat_at = now() where id = ${agentRunId}`;
  });
  return convoyTotals();
}

/** What the table says: count(*) and max(occurred_at) of the convoy's checkpoints. */
async function convoyTotals(): Promise<{ count: number; occurredAt: Date }> {
  const su = superuserSql(t.url);
  try {
    const [row] = await su`select count(*)::int as n, max(occurred_at) as last from worker_checkpoints
                            where workspace_id = ${WS} and convoy_id = ${CONVOY}`;
    return { count: row!.n, occurredAt: row!.last };
  } finally {
    await su.end();
  }
}

before(async () => {
  t = await createTestDatabase();
  await mkdir(OUTPUT, { recursive: true });
  // A coder run that finished, a reviewer run resumed on another worker, a docs run still queued.
  runs.coder = await recordAndClaim('add-greeting', 'coder', 'worker-7f3a-41');
  for (let i = 5; i >= 1; i--) await addCheckpoint(runs.coder, 600 + i * 40);
  await withWorkspace(t.db.app, WS, async (tx) => {
    await completeRun(tx, { agentRunId: runs.coder, leaseEpoch: 1 });
    await appendEvent(tx, {
      convoyId: CONVOY,
      agentRunId: runs.coder,
      type: 'role_complete',
      metadata: { harnessAlias: 'code' },
    });
  });
  runs.reviewer = await recordAndClaim('review-greeting', 'reviewer', 'worker-7f3a-41');
  await addCheckpoint(runs.reviewer, 240);
  await addCheckpoint(runs.reviewer, 200);
  await withWorkspace(t.db.app, WS, async (tx) => {
    await requeueRun(tx, { agentRunId: runs.reviewer, leaseEpoch: 1, nextAttempt: true });
    await claimRun(tx, { agentRunId: runs.reviewer, workerId: 'worker-c21d-07', leaseMs: 600_000 });
    await appendEvent(tx, {
      convoyId: CONVOY,
      agentRunId: runs.reviewer,
      type: 'run_resumed',
      metadata: { attempt: 2, fromCheckpoint: 2 },
    });
  });
  await addCheckpoint(runs.reviewer);
  runs.docs = await recordAndClaim('document-greeting', 'doc-writer', null);
  token = await createWorkspaceToken(t.db.app, WS);
  server = await createMissionControl({ db: t.db, config: { ...t.config, LOG_LEVEL: 'silent' } }).start(0);
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
  await server?.close();
  await t?.drop();
});

async function signIn(page: Page): Promise<void> {
  await page.goto(`${server.url}/convoys/${CONVOY}`);
  assert.equal(new URL(page.url()).pathname, '/login', 'signed out, the panel asks for a token');
  await page.fill('#token', token);
  // Signed in, the panel returns to the page first asked for.
  await Promise.all([page.waitForURL(`${server.url}/convoys/${CONVOY}`), page.click('button[type=submit]')]);
  await page.goto(`${server.url}/`);
}

const text = (page: Page, selector: string) => page.locator(selector).first().innerText();

test('the convoy panel shows the checkpoint count and last time, and updates them live when a checkpoint is written', async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 760 }, deviceScaleFactor: 1 });
  await signIn(page);
  await Promise.all([page.waitForURL(`${server.url}/convoys/${CONVOY}`), page.click(`a[href="/convoys/${CONVOY}"]`)]);
  await page.waitForSelector('[data-testid="live-status"][data-state="live"]');

  const before = await convoyTotals();
  assert.equal(await text(page, '[data-testid="convoy-checkpoint-count"]'), String(before.count));
  assert.equal(
    await page.getAttribute('[data-testid="convoy-last-checkpoint-at"]', 'data-iso'),
    before.occurredAt.toISOString(),
  );
  assert.equal(await text(page, `[data-run-id="${runs.reviewer}"] [data-field="checkpointCount"]`), '3');

  await page.evaluate(() => ((window as unknown as { loadedOnce: boolean }).loadedOnce = true));
  const afterInsert = await addCheckpoint(runs.reviewer);
  assert.equal(afterInsert.count, before.count + 1);
  await page.waitForFunction(
    (expected) => document.querySelector('[data-testid="convoy-checkpoint-count"]')?.textContent === expected,
    String(afterInsert.count),
  );
  assert.equal(
    await page.getAttribute('[data-testid="convoy-last-checkpoint-at"]', 'data-iso'),
    afterInsert.occurredAt.toISOString(),
  );
  assert.equal(await text(page, `[data-run-id="${runs.reviewer}"] [data-field="checkpointCount"]`), '4');
  assert.equal(await text(page, `[data-run-id="${runs.reviewer}"] [data-field="step"]`), '4');
  assert.equal(
    await page.evaluate(() => (window as unknown as { loadedOnce?: boolean }).loadedOnce),
    true,
    'updated in place, not reloaded',
  );

  await page.screenshot({ path: path.join(OUTPUT, 'convoy.png'), fullPage: true });
  await page.close();
});

test('the run timeline shows checkpoints and events in order and grows live', async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 }, deviceScaleFactor: 1 });
  await signIn(page);
  await page.goto(`${server.url}/runs/${runs.reviewer}`);
  await page.waitForSelector('[data-testid="live-status"][data-state="live"]');
  const items = () =>
    page.$$eval('ol.timeline > li', (lis) =>
      lis.map((li) => li.getAttribute('data-seq') ?? li.getAttribute('data-event-type')),
    );
  assert.deepEqual(await items(), ['4', '3', 'run_resumed', '2', '1'], 'newest first');
  assert.equal(await text(page, '[data-testid="chain-verdict"]'), 'verifies');

  await page.evaluate(() => ((window as unknown as { loadedOnce: boolean }).loadedOnce = true));
  await addCheckpoint(runs.reviewer);
  await page.waitForSelector('ol.timeline > li[data-seq="5"]');
  assert.deepEqual(await items(), ['5', '4', '3', 'run_resumed', '2', '1']);
  assert.equal(
    await page.evaluate(() => (window as unknown as { loadedOnce?: boolean }).loadedOnce),
    true,
    'updated in place, not reloaded',
  );
  await page.screenshot({ path: path.join(OUTPUT, 'run.png'), fullPage: true });
  await page.close();
});
