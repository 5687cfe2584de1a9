// The panel at fleet scale, in real Chromium over a real database: finding runs among 500 with
// filters and keyset pages (HTML and JSON agree with the table), a 2,000-checkpoint run's first
// and last timeline page, the chain verdict stored once verified, "stalled" raised live when a
// lease runs out, Cancel asking first, sign-in returning to the deep link, and every page
// fitting a 390 px screen; filters on worker, host, model, branch and the finished range; the stall
// detector's re-dispatch appearing on an open run page; retention and quota edited in Settings, and
// the admin's fleet storage; the convoy list filtered by text and run status, paged the same way.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import type { Sql } from 'postgres';
import { createMissionControl, type RunningMissionControl } from '../mission-control/server.ts';
import { createWorkspace } from '../store/runs.ts';
import { createAdminToken, createWorkspaceToken } from '../store/tokens.ts';
import { withWorkspace } from '../store/workspace.ts';
import { checkpointHash } from '../core/checkpoint-hash.ts';
import { createTestDatabase, superuserSql, type TestDatabase } from '../testbed/db.ts';
import { sweepStalledRuns } from '../operator/stall-detector.ts';
import { createQueue } from '../worker/queue/index.ts';
import { createLogger } from '../worker/log.ts';
import { launchChromium } from './support/browser.ts';

const WS = 'panel';
const OTHER = 'panel-other';
const RUNS = 500;
const OLD_CONVOYS = 60;
const STATUSES = ['queued', 'running', 'stalled', 'completed', 'failed', 'cancelled'] as const;

let t: TestDatabase;
let su: Sql;
let server: RunningMissionControl;
let browser: Browser;
let token = '';
let otherToken = '';
const LONG = 'run-long';
const BROKEN = 'run-broken';
const BARE = 'run-bare';

/** 500 runs over 5 convoys; created three to a second (ties on created_at), statuses in turn. */
async function seedRuns(): Promise<void> {
  await su`insert into convoys (workspace_id, id, created_at)
           select ${WS}, 'convoy-' || g, now() - make_interval(days => g) from generate_series(0, 4) g`;
  await su`insert into briefs (workspace_id, id, convoy_id, role_id)
           select ${WS}, 'brief-' || g, 'convoy-' || (g % 5), 'coder' from generate_series(1, ${RUNS}) g`;
  await su`insert into agent_runs (workspace_id, id, convoy_id, brief_id, job_id, job, harness_alias, status, attempt,
             worker_id, host_id, heartbeat_at, lease_expires_at, branch, created_at, finished_at)
           select ${WS}, 'run-' || lpad(g::text, 4, '0'), 'convoy-' || (g % 5), 'brief-' || g, 'job-' || g,
                  jsonb_build_object('brief', case when g % 50 = 0 then 'find the needle ' || g else 'task number ' || g end,
                                     'model', 'replay:/tmp/none.json'),
                  'code', case s.status when 'stalled' then 'running' else s.status end, 1,
                  case when s.status in ('running', 'stalled') then 'worker-' || (g % 7) end, 'host-' || (g % 3),
                  now(), case s.status when 'running' then now() + interval '1 hour'
                                        when 'stalled' then now() - interval '1 minute' end,
                  'echodo/brief-' || g || '-x', now() - make_interval(secs => g / 3),
                  case when s.status in ('completed', 'failed', 'cancelled') then now() - make_interval(hours => g % 48) end
             from generate_series(1, ${RUNS}) g
            cross join lateral (select (${STATUSES as unknown as string[]}::text[])[1 + g % 6] as status) s`;
}

function checkpointRow(runId: string, convoyId: string, briefId: string, seq: number, prevHash: string | null) {
  const toolHistory = [
    { round: seq, tool: 'write_file', input: { path: `src/file-${seq}.ts` }, ok: true, result: `wrote ${seq}` },
  ];
  const filesTouched = [{ path: `src/file-${seq}.ts`, sha256: 'a'.repeat(64), bytes: 10, deleted: false }];
  const commitOid = seq.toString(16).padStart(40, '0');
  const payload = {
    workspaceId: WS,
    agentRunId: runId,
    checkpointSeq: seq,
    step: seq,
    toolHistory,
    filesTouched,
    branch: 'echodo/long',
    worktreePath: '/tmp/wt-long',
    commitOid,
  };
  return {
    workspace_id: WS,
    agent_run_id: runId,
    convoy_id: convoyId,
    brief_id: briefId,
    checkpoint_seq: seq,
    step: seq,
    attempt: 1,
    lease_epoch: 1,
    tool_history: toolHistory,
    files_touched: filesTouched,
    branch: 'echodo/long',
    worktree_path: '/tmp/wt-long',
    commit_oid: commitOid,
    prev_hash: prevHash,
    hash: checkpointHash(prevHash, payload),
    occurred_at: new Date(Date.now() - (100_000 - seq) * 1000),
  };
}

/** A run with `count` checkpoints, linked into a valid hash chain. */
async function seedCheckpointedRun(runId: string, briefId: string, count: number, status: string): Promise<void> {
  await su`insert into briefs (workspace_id, id, convoy_id, role_id) values (${WS}, ${briefId}, 'convoy-0', 'coder')`;
  await su`insert into agent_runs (workspace_id, id, convoy_id, brief_id, job_id, job, harness_alias, status, branch,
             worktree_path, host_id, worker_id, started_at, created_at, finished_at)
           values (${WS}, ${runId}, 'convoy-0', ${briefId}, ${'job-' + runId},
                   ${su.json({ brief: `The brief of ${runId}.`, model: 'gpt-test-1' })}, 'code', ${status}, 'echodo/long',
                   '/tmp/wt-long', 'host-long', 'worker-long', now() - interval '2 hours', now() - interval '3 hours',
                   case when ${status} = 'running' then null else now() end)`;
  let prev: string | null = null;
  const rows = [];
  for (let seq = 1; seq <= count; seq++) {
    const row = checkpointRow(runId, 'convoy-0', briefId, seq, prev);
    prev = row.hash;
    rows.push(row);
  }
  for (let i = 0; i < rows.length; i += 500) {
    const chunk = rows
      .slice(i, i + 500)
      .map((r) => ({ ...r, tool_history: su.json(r.tool_history), files_touched: su.json(r.files_touched) }));
    await su`insert into worker_checkpoints ${su(chunk as never)}`;
  }
}

before(async () => {
  t = await createTestDatabase();
  su = superuserSql(t.url);
  await withWorkspace(t.db.app, WS, (tx) => createWorkspace(tx));
  await withWorkspace(t.db.app, OTHER, (tx) => createWorkspace(tx));
  await seedRuns();
  // Older than the five above, so that the convoy list runs past its first page.
  await su`insert into convoys (workspace_id, id, created_at)
           select ${WS}, 'old-convoy-' || g, now() - interval '30 days' - make_interval(hours => g)
             from generate_series(1, ${OLD_CONVOYS}) g`;
  await seedCheckpointedRun(LONG, 'brief-long', 2000, 'completed');
  await seedCheckpointedRun(BROKEN, 'brief-broken', 4, 'completed');
  await su`update worker_checkpoints set hash = repeat('0', 64) where agent_run_id = ${BROKEN} and checkpoint_seq = 3`;
  await seedCheckpointedRun(BARE, 'brief-bare', 0, 'failed');
  token = await createWorkspaceToken(t.db.app, WS);
  otherToken = await createWorkspaceToken(t.db.app, OTHER);
  server = await createMissionControl({ db: t.db, config: { ...t.config, LOG_LEVEL: 'silent' } }).start(0);
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
  await server?.close();
  await su?.end();
  await t?.drop();
});

const api = (path: string, bearer = token) =>
  fetch(server.url + path, { headers: { authorization: `Bearer ${bearer}` } });

/** Every page of GET /api/runs for `query`, following cursors. */
async function allPages(query: string): Promise<{ ids: string[]; pages: number }> {
  const ids: string[] = [];
  let cursor: string | null = null;
  let pages = 0;
  do {
    const res = await api(`/api/runs?${query}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
    assert.equal(res.status, 200);
    const body = (await res.json()) as { runs: { agentRunId: string }[]; cursor: string | null };
    ids.push(...body.runs.map((r) => r.agentRunId));
    cursor = body.cursor;
    pages++;
  } while (cursor);
  return { ids, pages };
}

/** What the table says: the ids of this workspace's runs matching `where`, newest first. */
async function idsWhere(where: string): Promise<string[]> {
  const rows = await su.unsafe(`select id from agent_runs where workspace_id = '${WS}' and ${where}
                                 order by created_at desc, id desc`);
  return rows.map((r) => r.id as string);
}

test('GET /api/runs filters by status (stalled, cancelled), convoy and text, and its keyset pages cover each match once', async () => {
  const failed = await allPages('status=failed&limit=7');
  assert.deepEqual(
    failed.ids,
    await idsWhere(`status = 'failed'`),
    'the pages in order are exactly the failed runs, newest first',
  );
  assert.ok(failed.pages > 10);
  assert.deepEqual(
    (await allPages('status=stalled&limit=13')).ids,
    await idsWhere(`status = 'running' and lease_expires_at < now()`),
  );
  assert.deepEqual((await allPages('status=cancelled&limit=50')).ids, await idsWhere(`status = 'cancelled'`));
  assert.deepEqual(
    (await allPages('convoy=convoy-3&status=completed&limit=9')).ids,
    await idsWhere(`convoy_id = 'convoy-3' and status = 'completed'`),
  );
  const needles = await allPages('q=NEEDLE&limit=4');
  assert.deepEqual(needles.ids, await idsWhere(`job->>'brief' like 'find the needle%'`));
  assert.equal(needles.ids.length, 10);
  assert.deepEqual(
    (await allPages('q=worker-3&status=running')).ids,
    await idsWhere(`worker_id = 'worker-3' and status = 'running'`),
  );
  assert.deepEqual((await allPages('q=100%25')).ids, [], '% is a literal character, not a pattern');
  const all = await allPages('limit=200');
  assert.equal(all.ids.length, new Set(all.ids).size, 'no run twice');
  assert.deepEqual(all.ids, await idsWhere('true'));
  assert.equal(all.ids.length, RUNS + 3);
});

test('GET /api/runs filters by worker, host, model, branch and the finished range, paged the same way', async () => {
  assert.deepEqual((await allPages('model=gpt-test-1&limit=2')).ids, await idsWhere(`job->>'model' = 'gpt-test-1'`));
  assert.equal((await allPages('model=gpt-test-1')).ids.length, 3);
  assert.deepEqual(
    (await allPages('worker=worker-3&host=host-1&limit=3')).ids,
    await idsWhere(`worker_id = 'worker-3' and host_id = 'host-1'`),
  );
  assert.deepEqual((await allPages(`branch=${encodeURIComponent('echodo/brief-7-x')}`)).ids, ['run-0007']);
  const from = new Date(Date.now() - 20.5 * 3600_000).toISOString();
  const to = new Date(Date.now() - 10.5 * 3600_000).toISOString();
  const finished = await allPages(`finishedFrom=${from}&finishedTo=${to}&limit=9`);
  assert.deepEqual(finished.ids, await idsWhere(`finished_at >= '${from}' and finished_at < '${to}'`));
  assert.ok(finished.ids.length > 20 && finished.pages > 3, `${finished.ids.length} runs in ${finished.pages} pages`);
  assert.equal((await api('/api/runs?finishedTo=soon')).status, 400);
});

test('GET /api/runs: bad filters are 400, no token 401, another workspace sees none of these runs', async () => {
  assert.equal((await api('/api/runs?status=sleeping')).status, 400);
  assert.equal((await api('/api/runs?limit=0')).status, 400);
  assert.equal((await api('/api/runs?from=yesterday')).status, 400);
  assert.equal((await fetch(`${server.url}/api/runs`)).status, 401);
  const other = (await (await api('/api/runs', otherToken)).json()) as { runs: unknown[] };
  assert.deepEqual(other.runs, []);
  assert.equal((await api(`/api/runs/${LONG}`, otherToken)).status, 404);
  const garbage = await api('/api/runs?cursor=not-a-cursor&limit=3');
  assert.equal(garbage.status, 200, 'a cursor that does not decode reads from the start');
});

test('GET /api/runs/:id: brief, harness, model, host, worktree, attempts, duration, stalled and the chain verdict', async () => {
  const long = (await (await api(`/api/runs/${LONG}`)).json()) as Record<string, any>;
  assert.equal(long.brief, `The brief of ${LONG}.`);
  assert.equal(long.harness, 'code');
  assert.equal(long.model, 'gpt-test-1');
  assert.equal(long.host, 'host-long');
  assert.equal(long.worktree, '/tmp/wt-long');
  assert.equal(long.attempts, 1);
  assert.ok(long.durationMs >= 2 * 3600_000 - 5000 && long.durationMs < 2 * 3600_000 + 5000);
  assert.equal(long.stalled, false);
  assert.deepEqual(long.chain, { verdict: 'verifies' });
  assert.equal(long.checkpointCount, 2000);
  const [stalled] = await idsWhere(`status = 'running' and lease_expires_at < now()`);
  assert.equal(((await (await api(`/api/runs/${stalled}`)).json()) as { stalled: boolean }).stalled, true);
  assert.deepEqual(((await (await api(`/api/runs/${BARE}`)).json()) as { chain: unknown }).chain, {
    verdict: 'no checkpoints yet',
  });
  const broken = (await (await api(`/api/runs/${BROKEN}`)).json()) as { chain: { verdict: string; brokenAt: number } };
  assert.equal(broken.chain.verdict, 'broken');
  assert.equal(broken.chain.brokenAt, 3);
});

test('GET /api/convoys pages by cursor', async () => {
  const first = (await (await api('/api/convoys?limit=2')).json()) as {
    convoys: { convoyId: string }[];
    cursor: string;
  };
  assert.deepEqual(
    first.convoys.map((c) => c.convoyId),
    ['convoy-0', 'convoy-1'],
  );
  const second = (await (await api(`/api/convoys?limit=2&cursor=${first.cursor}`)).json()) as {
    convoys: { convoyId: string }[];
  };
  assert.deepEqual(
    second.convoys.map((c) => c.convoyId),
    ['convoy-2', 'convoy-3'],
  );
});

test('the convoy list pages past its first 50 by keyset, in the HTML and GET /api/convoys alike', async () => {
  const expected = (await su`select id from convoys where workspace_id = ${WS} order by created_at desc, id desc`).map(
    (r) => r.id as string,
  );
  assert.equal(expected.length, 5 + OLD_CONVOYS);
  const json: string[] = [];
  let cursor: string | null = null;
  do {
    const body = (await (await api(`/api/convoys?limit=200${cursor ? `&cursor=${cursor}` : ''}`)).json()) as {
      convoys: { convoyId: string }[];
      cursor: string | null;
    };
    json.push(...body.convoys.map((c) => c.convoyId));
    cursor = body.cursor;
  } while (cursor);
  assert.deepEqual(json, expected);
  const page = await signedInPage();
  const rows = () =>
    page.$$eval('[data-testid="convoy-list"] tr[data-convoy-id]', (trs) => trs.map((tr) => tr.dataset.convoyId!));
  const first = await rows();
  assert.equal(first.length, 50);
  await Promise.all([page.waitForURL(/cursor=/), page.click('[data-testid="older"]')]);
  assert.deepEqual([...first, ...(await rows())], expected, 'the second page goes on where the first stopped');
  assert.equal(await page.locator('[data-testid="older"]').count(), 0);
  await page.close();
});

test('the convoy list filters by id or brief and by a run status, in the HTML and GET /api/convoys alike', async () => {
  const convoysWhere = async (where: string) =>
    (
      await su.unsafe(`select v.id from convoys v where v.workspace_id = '${WS}' and ${where}
                        order by v.created_at desc, v.id desc`)
    ).map((r) => r.id as string);
  const pages = async (query: string) => {
    const ids: string[] = [];
    let cursor: string | null = null;
    do {
      const res = await api(`/api/convoys?${query}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
      assert.equal(res.status, 200);
      const body = (await res.json()) as { convoys: { convoyId: string }[]; cursor: string | null };
      ids.push(...body.convoys.map((c) => c.convoyId));
      cursor = body.cursor;
    } while (cursor);
    return ids;
  };
  const withRun = (cond: string) =>
    `exists (select 1 from agent_runs a where a.workspace_id = v.workspace_id and a.convoy_id = v.id and ${cond})`;
  assert.deepEqual(await pages('q=OLD-CONVOY-1&limit=4'), await convoysWhere(`v.id ilike '%old-convoy-1%'`));
  assert.deepEqual(await pages('q=needle'), await convoysWhere(withRun(`a.job->>'brief' ilike '%needle%'`)));
  const stalled = await convoysWhere(withRun(`a.status = 'running' and a.lease_expires_at < now()`));
  assert.ok(stalled.length > 0);
  assert.deepEqual(await pages('status=stalled&limit=2'), stalled);
  assert.deepEqual(await pages('status=budget_exhausted'), []);
  assert.equal((await api('/api/convoys?status=asleep')).status, 400);
  assert.deepEqual(((await (await api('/api/convoys?q=convoy', otherToken)).json()) as { convoys: [] }).convoys, []);

  const page = await signedInPage();
  const rows = () =>
    page.$$eval('[data-testid="convoy-list"] tr[data-convoy-id]', (trs) => trs.map((tr) => tr.dataset.convoyId!));
  const [cancelled] = await su`select count(*)::int as n from agent_runs
                                where workspace_id = ${WS} and convoy_id = 'convoy-1' and status = 'cancelled'`;
  assert.equal(
    await page.locator('tr[data-convoy-id="convoy-1"] [data-field="cancelled"]').innerText(),
    String(cancelled!.n),
    'the home page has a cancelled column',
  );
  await page.goto(`${server.url}/convoys/convoy-1`);
  assert.equal(await page.locator('[data-field="runs-cancelled"]').innerText(), String(cancelled!.n));
  await page.goto(`${server.url}/`);
  await page.fill('[data-testid="convoy-filter-q"]', 'old-convoy');
  await Promise.all([page.waitForURL(/q=old-convoy/), page.click('[data-testid="convoy-filter-apply"]')]);
  const first = await rows();
  assert.equal(first.length, 50);
  await Promise.all([page.waitForURL(/cursor=/), page.click('[data-testid="older"]')]);
  assert.match(page.url(), /q=old-convoy/, '"Older" keeps the filter');
  assert.deepEqual([...first, ...(await rows())], await convoysWhere(`v.id like 'old-convoy-%'`));
  await page.close();
});

async function signedInPage(width = 1280): Promise<Page> {
  const page = await browser.newPage({ viewport: { width, height: 900 } });
  await page.goto(`${server.url}/login`);
  await page.fill('#token', token);
  await Promise.all([page.waitForURL(`${server.url}/`), page.click('button[type=submit]')]);
  return page;
}

test('the runs page filters and pages 500 runs server-side, keeping the filter on "Older"', async () => {
  const page = await signedInPage();
  await page.goto(`${server.url}/runs`);
  await page.selectOption('[data-testid="filter-status"]', 'failed');
  await Promise.all([page.waitForURL(/status=failed/), page.click('[data-testid="filter-apply"]')]);
  const seen: string[] = [];
  for (;;) {
    seen.push(
      ...(await page.$$eval('[data-testid="run-list"] tr[data-run-id]', (rows) =>
        rows.map((r) => r.getAttribute('data-run-id')!),
      )),
    );
    const older = page.locator('[data-testid="older"]');
    if (!(await older.count())) break;
    await Promise.all([page.waitForURL(/cursor=/), older.click()]);
    assert.match(page.url(), /status=failed/);
  }
  assert.deepEqual(seen, await idsWhere(`status = 'failed'`));
  await page.fill('[data-testid="filter-q"]', 'needle');
  await page.selectOption('[data-testid="filter-status"]', '');
  await Promise.all([page.waitForURL(/q=needle/), page.click('[data-testid="filter-apply"]')]);
  assert.equal(await page.locator('[data-testid="run-list"] tr[data-run-id]').count(), 10);
  await page.fill('[data-testid="filter-q"]', '');
  await page.fill('[data-testid="filter-model"]', 'gpt-test-1');
  await Promise.all([page.waitForURL(/model=gpt-test-1/), page.click('[data-testid="filter-apply"]')]);
  assert.deepEqual(
    await page.$$eval('[data-testid="run-list"] tr[data-run-id]', (rows) => rows.map((r) => r.dataset.runId)),
    await idsWhere(`job->>'model' = 'gpt-test-1'`),
  );
  assert.deepEqual(
    await page.locator('[data-testid="run-list"] [data-field="model"]').allInnerTexts(),
    ['gpt-test-1', 'gpt-test-1', 'gpt-test-1'],
    'each row shows its model',
  );
  await page.close();
});

test("a 2,000-checkpoint run's timeline: newest page first, the last page by 'older', the verdict stored once", async () => {
  const page = await signedInPage();
  await page.goto(`${server.url}/runs/${LONG}`);
  const seqs = () =>
    page.$$eval('ol.timeline > li[data-seq]', (lis) => lis.map((li) => Number(li.getAttribute('data-seq'))));
  const first = await seqs();
  assert.equal(first.length, 50);
  assert.equal(first[0], 2000);
  assert.equal(first.at(-1), 1951);
  assert.equal(await page.locator('[data-testid="chain-verdict"]').innerText(), 'verifies');
  const [stored] = await su`select verified_seq from checkpoint_chain_verdicts where agent_run_id = ${LONG}`;
  assert.equal(stored?.verified_seq, 2000, 'the verified prefix is kept, so later pages verify nothing again');
  assert.match(await page.locator('[data-testid="run-brief"]').innerText(), /The brief of run-long\./);
  assert.equal(await page.locator('[data-testid="run-model"]').innerText(), 'gpt-test-1');
  assert.equal(await page.locator('[data-testid="branch"]').innerText(), 'echodo/long');
  assert.equal(await page.getAttribute('[data-testid="run-branch"] button.copy', 'data-copy'), 'echodo/long');
  assert.equal(
    await page.getAttribute('[data-testid="run-commit"] button.copy', 'data-copy'),
    (2000).toString(16).padStart(40, '0'),
  );
  assert.equal(await page.locator('[data-testid="worktree"]').innerText(), '/tmp/wt-long');
  assert.match(await page.locator('[data-testid="run-host"]').innerText(), /host-long/);
  await page.locator('[data-testid="calls-2000"] details summary').click();
  assert.match(await page.locator('[data-testid="calls-2000"]').innerText(), /src\/file-2000\.ts[\s\S]*wrote 2000/);
  await Promise.all([page.waitForURL(/before=1951/), page.click('[data-testid="older"]')]);
  assert.equal((await seqs())[0], 1950);
  await page.goto(`${server.url}/runs/${LONG}?before=51`);
  const last = await seqs();
  assert.deepEqual([last.length, last[0], last.at(-1)], [50, 50, 1]);
  assert.equal(await page.locator('[data-testid="older"]').count(), 0, 'the last page has no "older"');
  await page.close();
});

test('chain verdicts "broken at N" and "no checkpoints yet"; tool calls redacted and cut', async () => {
  // A call recorded before redaction, with a long result: the page redacts it and cuts it.
  const secret = 'sk-live-0123456789abcdef0123456789';
  const calls = [
    { round: 4, tool: 'run_command', input: { command: `echo ${secret}` }, ok: true, result: 'x'.repeat(9000) },
  ];
  await su`update worker_checkpoints set tool_history = ${su.json(calls)}
            where agent_run_id = ${BROKEN} and checkpoint_seq = 4`;
  const page = await signedInPage();
  await page.goto(`${server.url}/runs/${BROKEN}`);
  assert.equal(await page.locator('[data-testid="chain-verdict"]').innerText(), 'broken at 3');
  const shown = (await page.locator('[data-testid="calls-4"]').textContent()) ?? '';
  assert.match(shown, /echo /);
  assert.ok(!shown.includes(secret), 'the secret is redacted on the page');
  assert.match(shown, /\d+ more chars/, 'a long result is cut');
  assert.ok(!shown.includes('x'.repeat(4001)));
  await page.goto(`${server.url}/runs/${BARE}`);
  assert.equal(await page.locator('[data-testid="chain-verdict"]').innerText(), 'no checkpoints yet');
  await page.close();
});

test('a running run whose lease runs out turns "stalled" live, without a reload', async () => {
  const [runId] = await idsWhere(`status = 'running' and lease_expires_at > now()`);
  await su`update agent_runs set lease_expires_at = now() + interval '8 seconds' where workspace_id = ${WS} and id = ${runId!}`;
  const page = await signedInPage();
  await page.goto(`${server.url}/runs/${runId}`);
  await page.waitForSelector('[data-testid="live-status"][data-state="live"]');
  const flag = page.locator('[data-testid="run-status"] [data-field="stalled"]');
  assert.equal(await flag.isHidden(), true, 'not stalled while the lease holds');
  await page.evaluate(() => ((window as unknown as { loadedOnce: boolean }).loadedOnce = true));
  // A heartbeat renews the lease (no notification comes): the lease the page read passes, the run is not stalled.
  const [{ first }] = (await su`update agent_runs set lease_expires_at = lease_expires_at + interval '6 seconds'
                                 where workspace_id = ${WS} and id = ${runId!}
                                 returning lease_expires_at - interval '6 seconds' as first`) as unknown as [
    { first: Date },
  ];
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, first.getTime() - Date.now()) + 3000));
  assert.equal(await flag.isHidden(), true, 'a renewed lease is read again before the run is called stalled');
  await flag.waitFor({ state: 'visible', timeout: 15_000 });
  assert.equal(
    await page.evaluate(() => (window as unknown as { loadedOnce?: boolean }).loadedOnce),
    true,
    'not reloaded',
  );
  await page.close();
});

test('Cancel asks for confirmation before it cancels', async () => {
  const [runId] = await idsWhere(`status = 'queued'`);
  const page = await signedInPage(390);
  await page.goto(`${server.url}/runs/${runId}`);
  await page.click('[data-testid="cancel"]');
  await page.waitForSelector('[data-testid="confirm"]');
  assert.ok((await page.evaluate(() => document.documentElement.scrollWidth)) <= 390, 'the confirmation fits 390 px');
  const [still] = await su`select status from agent_runs where workspace_id = ${WS} and id = ${runId!}`;
  assert.equal(still?.status, 'queued', 'one click cancels nothing');
  await Promise.all([page.waitForURL(`${server.url}/runs/${runId}`), page.click('[data-testid="confirm-yes"]')]);
  const [done] = await su`select status from agent_runs where workspace_id = ${WS} and id = ${runId!}`;
  assert.equal(done?.status, 'cancelled');
  await page.close();
});

test('signing in from a deep link returns to the page asked for', async () => {
  const page = await browser.newPage();
  const deep = `${server.url}/runs/${LONG}?before=51`;
  await page.goto(deep);
  assert.equal(new URL(page.url()).pathname, '/login');
  await page.fill('#token', token);
  await Promise.all([page.waitForURL(deep), page.click('button[type=submit]')]);
  assert.equal(await page.locator('ol.timeline > li[data-seq="50"]').count(), 1);
  const offsite = await fetch(`${server.url}/login`, {
    method: 'POST',
    redirect: 'manual',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: `token=${token}&next=${encodeURIComponent('//evil.example/')}`,
  });
  assert.equal(offsite.headers.get('location'), '/', 'never returns to another site');
  await page.close();
});

test('at 390 px no page is wider than the viewport', async () => {
  const page = await signedInPage(390);
  const [stalled] = await idsWhere(`status = 'running' and lease_expires_at < now()`);
  const paths = ['/', '/?q=needle', '/convoys/convoy-0', `/runs/${LONG}`, `/runs/${stalled}`, `/runs/${BARE}`];
  paths.push('/runs', '/runs?status=nope', '/settings', '/storage', '/login');
  for (const path of paths) {
    await page.goto(server.url + path);
    const width = await page.evaluate(() => document.documentElement.scrollWidth);
    assert.ok(width <= 390, `${path} is ${width} px wide at 390 px`);
  }
  await page.close();
  // The admin's pages (the diff page and a doc-writer's review are measured where they have a real repository).
  const admin = await browser.newPage({ viewport: { width: 390, height: 900 } });
  await admin.goto(`${server.url}/login`);
  await admin.fill('#token', await createAdminToken(t.db.admin));
  await Promise.all([admin.waitForURL(`${server.url}/fleet`), admin.click('button[type=submit]')]);
  for (const path of ['/fleet', '/fleet/storage']) {
    await admin.goto(server.url + path);
    const width = await admin.evaluate(() => document.documentElement.scrollWidth);
    assert.ok(width <= 390, `${path} is ${width} px wide at 390 px`);
  }
  await admin.close();
});

test('settings: built-in harnesses stay listed beside a custom one, a route to a missing harness is flagged, fields have labels', async () => {
  await withWorkspace(t.db.app, WS, async (tx) => {
    await tx`insert into harness_providers (workspace_id, alias, needs_worktree) values (${WS}, 'lint', true)`;
    await tx`insert into role_harness_routes (workspace_id, role_id, harness_alias) values (${WS}, 'writer', 'ghost')`;
    await tx`insert into role_harness_routes (workspace_id, role_id, harness_alias) values (${WS}, 'linter', 'lint')`;
  });
  const page = await signedInPage();
  await page.goto(`${server.url}/settings`);
  const aliases = await page.$$eval('[data-testid="harnesses"] tr[data-harness]', (rows) =>
    rows.map((r) => r.getAttribute('data-harness')),
  );
  assert.deepEqual(aliases.sort(), ['code', 'doc-writer', 'lint']);
  assert.match(await page.locator('tr[data-harness="code"]').innerText(), /built-in/);
  // A row of a built-in's alias overrides it: listed once, as the workspace's own.
  await su`insert into harness_providers (workspace_id, alias, needs_worktree) values (${WS}, 'code', false)`;
  await page.reload();
  assert.equal(await page.locator('tr[data-harness="code"]').count(), 1);
  assert.doesNotMatch(await page.locator('tr[data-harness="code"]').innerText(), /built-in/);
  assert.match(await page.locator('tr[data-harness="code"]').innerText(), /repo root/);
  await su`delete from harness_providers where workspace_id = ${WS} and alias = 'code'`;
  assert.equal(
    await page.locator('[data-testid="route-missing-writer"]').count(),
    1,
    'the route to a missing harness is flagged',
  );
  assert.equal(await page.locator('[data-testid="route-missing-linter"]').count(), 0);
  const unlabelled = await page.$$eval('main form input:not([type=hidden]), main form select', (els) =>
    els.filter((el) => !el.closest('label')).map((el) => el.getAttribute('name')),
  );
  assert.deepEqual(unlabelled, [], 'every field has a visible label');
  await page.close();
});

test('settings: retention and quota are edited in the panel; an admin sees storage across the fleet', async () => {
  const page = await signedInPage();
  await page.goto(`${server.url}/settings`);
  await page.getByLabel('Keep the last K checkpoints of a finished run').fill('5');
  await page.getByLabel('…once it finished D days ago').fill('2');
  await page.getByLabel('Quota (bytes; 500M, 20G)').fill('20G');
  await Promise.all([page.waitForURL(`${server.url}/settings`), page.click('[data-testid="save-storage-policy"]')]);
  const [policy] = await su`select keep_last, keep_days, quota_bytes from workspace_storage_policies
                             where workspace_id = ${WS}`;
  assert.deepEqual([policy?.keep_last, policy?.keep_days, Number(policy?.quota_bytes)], [5, 2, 20 * 2 ** 30]);
  assert.equal(await page.locator('[data-testid="settings-quota"]').innerText(), '20 GiB');
  await page.getByLabel('Quota (bytes; 500M, 20G)').fill('lots');
  await page.click('[data-testid="save-storage-policy"]');
  assert.match(await page.locator('[data-testid="settings-error"]').innerText(), /quota/);
  await page.close();

  const admin = await createAdminToken(t.db.admin);
  assert.equal((await api('/api/fleet/storage')).status, 403, 'a workspace token sees no fleet');
  const fleet = (await (await api('/api/fleet/storage', admin)).json()) as {
    postgresBytes: number;
    workspaces: { workspaceId: string; checkpointRows: number; quotaBytes: number | null }[];
  };
  const [{ n }] = (await su`select count(*)::int as n from worker_checkpoints where workspace_id = ${WS}`) as never as [
    { n: number },
  ];
  const mine = fleet.workspaces.find((w) => w.workspaceId === WS);
  assert.deepEqual([mine?.checkpointRows, mine?.quotaBytes], [n, 20 * 2 ** 30]);
  assert.ok(fleet.workspaces.some((w) => w.workspaceId === OTHER));
  assert.ok(fleet.postgresBytes > 0);
  const adminPage = await browser.newPage();
  await adminPage.goto(`${server.url}/login`);
  await adminPage.fill('#token', admin);
  await Promise.all([adminPage.waitForURL(`${server.url}/fleet`), adminPage.click('button[type=submit]')]);
  await Promise.all([adminPage.waitForURL(/\/fleet\/storage$/), adminPage.click('[data-testid="fleet-storage-link"]')]);
  const total = Number(await adminPage.locator('[data-testid="fleet-storage-total"]').getAttribute('data-bytes'));
  assert.ok(total >= fleet.postgresBytes * 0.5, `${total} bytes shown`);
  assert.equal(await adminPage.locator(`[data-testid="fleet-storage"] tr[data-workspace-id="${WS}"]`).count(), 1);
  await adminPage.close();
});

// Last: the sweep re-dispatches every stalled run of the seed.
test("the stall detector's re-dispatch shows on the open run page without a reload", async () => {
  const [runId] = await idsWhere(`status = 'running' and lease_expires_at < now()`);
  const page = await signedInPage();
  await page.goto(`${server.url}/runs/${runId}`);
  await page.waitForSelector('[data-testid="live-status"][data-state="live"]');
  assert.equal(await page.locator('[data-testid="run-status"] [data-field="stalled"]').isVisible(), true);
  await page.evaluate(() => ((window as unknown as { loadedOnce: boolean }).loadedOnce = true));
  const queue = createQueue({ config: t.config, db: t.db, workerId: 'panel-test' });
  try {
    const swept = await sweepStalledRuns({
      config: t.config,
      db: t.db,
      queue,
      log: createLogger({ level: 'silent' }),
      queuedMs: 86_400_000,
    });
    assert.ok(swept.redispatched.includes(runId!));
  } finally {
    await queue.close();
  }
  await page.waitForSelector('li[data-event-type="run_redispatched"]', { timeout: 15_000 });
  assert.match(await page.locator('[data-testid="run-status"]').innerText(), /queued/);
  assert.equal(await page.locator('[data-testid="run-status"] [data-field="stalled"]').isHidden(), true);
  assert.equal(
    await page.evaluate(() => (window as unknown as { loadedOnce?: boolean }).loadedOnce),
    true,
    'not reloaded',
  );
  await page.close();
});
