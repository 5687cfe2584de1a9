// Mission control's operator actions over real HTTP, with real workers, Postgres and git:
// cancel, retry and fork from the API; the checkpoint diff; the same 401/404 rules as reads;
// cookie-authenticated writes need the page's CSRF token and the same origin.
import assert from 'node:assert/strict';
import { mkdir, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { createMissionControl, type RunningMissionControl } from '../mission-control/server.ts';
import { csrfTokenFor } from '../mission-control/routes-actions.ts';
import { createWorkspace } from '../store/runs.ts';
import { createWorkspaceToken } from '../store/tokens.ts';
import { withWorkspace } from '../store/workspace.ts';
import { PROJECT_ROOT } from '../core/config.ts';
import { waitFor, type Child } from './support/child.ts';
import { createScenario, type Scenario, type TranscriptStep } from './support/scenario.ts';
import { launchChromium, signInAt } from './support/browser.ts';

const write = (file: string, content: string, delayMs = 10): TranscriptStep => ({
  toolCalls: [{ toolName: 'write_file', input: { path: file, content } }],
  delayMs,
});
const BIG = `${'a line of a big generated file, repeated to go over the diff cap\n'.repeat(6000)}`;
// Round 3 "thinks" for a minute: a run can be caught alive however slow the machine is.
const STEPS: TranscriptStep[] = [
  write('src/greet.ts', 'export const greet = (n: string) => `hello ${n}`;\n'),
  {
    toolCalls: [
      {
        toolName: 'write_file',
        input: { path: 'src/greet.ts', content: 'export const greet = (n: string) => `hi ${n}`;\n' },
      },
      {
        toolName: 'write_file',
        input: { path: 'notes/secret.txt', content: 'token sk-live-0123456789abcdef0123456789\n' },
      },
    ],
    delayMs: 10,
  },
  write('big.txt', BIG, 120_000),
  { text: 'Done.' },
];

let s: Scenario;
let worker: Child;
let server: RunningMissionControl;
let token: string;
let otherToken: string;
let readOnlyToken: string;
let quickModel: string;
let bigModel: string;

before(async () => {
  s = await createScenario({ steps: STEPS, env: { WORKER_LEASE_MS: '8000', WORKER_HEARTBEAT_MS: '400' } });
  const dir = path.dirname(s.transcriptPath);
  await writeFile(path.join(dir, 'quick.json'), JSON.stringify({ steps: [write('q.txt', 'q\n'), { text: 'ok' }] }));
  await writeFile(path.join(dir, 'big.json'), JSON.stringify({ steps: [write('big.txt', BIG, 0), { text: 'ok' }] }));
  quickModel = `replay:${path.join(dir, 'quick.json')}`;
  bigModel = `replay:${path.join(dir, 'big.json')}`;
  await withWorkspace(s.t.db.app, 'other', (tx) => createWorkspace(tx));
  token = await createWorkspaceToken(s.t.db.app, s.workspaceId);
  otherToken = await createWorkspaceToken(s.t.db.app, 'other');
  readOnlyToken = await createWorkspaceToken(s.t.db.app, s.workspaceId, { readOnly: true });
  server = await createMissionControl({
    db: s.t.db,
    config: { ...s.config, LOG_LEVEL: 'silent' },
    queue: s.queue,
  }).start(0);
  worker = s.spawnWorker();
});
after(async () => {
  await worker?.stop();
  await server?.close();
  await s?.close();
});

const post = (p: string, body: unknown, headers: Record<string, string> = { authorization: `Bearer ${token}` }) =>
  fetch(server.url + p, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
    redirect: 'manual',
  });
const getJson = (p: string, t = token) => fetch(server.url + p, { headers: { authorization: `Bearer ${t}` } });

async function checkpointsOf(id: string, n: number) {
  await waitFor(async () => (await s.checkpoints(id)).length >= n, {
    timeoutMs: 120_000,
    what: `${n} checkpoints of ${id}`,
  }).catch((e: Error) => {
    throw new Error(`${e.message}\n${worker.output()}`);
  });
}

test('cancel from the API: 401 without a token, 404 for another workspace as for a missing run, then the run stops', async () => {
  const { agentRunId } = await s.dispatch();
  await checkpointsOf(agentRunId, 2);
  assert.equal((await post(`/api/runs/${agentRunId}/cancel`, {}, {})).status, 401);
  const foreign = await post(`/api/runs/${agentRunId}/cancel`, {}, { authorization: `Bearer ${otherToken}` });
  const missing = await post('/api/runs/no-such-run/cancel', {}, { authorization: `Bearer ${otherToken}` });
  assert.equal(foreign.status, 404);
  assert.deepEqual(
    await foreign.json(),
    await missing.json(),
    "another workspace's run answers exactly as a missing one",
  );

  const res = await post(`/api/runs/${agentRunId}/cancel`, {});
  assert.equal(res.status, 200);
  const body = await res.json();
  assert.equal(body.immediate, false);
  const run = await s.waitForStatus(agentRunId, 'cancelled', 120_000);
  assert.match(run.cancel_requested_by, /^api:/, 'who asked: the API token');
  assert.equal((await s.checkpoints(agentRunId)).length, 2);
  assert.equal((await post(`/api/runs/${agentRunId}/retry`, {})).status, 409, 'a cancelled run is not retried');
});

test("the diff of a checkpoint: files with +/- counts, the diff text, the round's tool calls (redacted); big diffs truncated", async () => {
  const { agentRunId } = await s.dispatch({ model: quickModel });
  await s.waitForStatus(agentRunId, 'completed', 120_000);
  const source = (await s.dispatch()).agentRunId;
  await checkpointsOf(source, 2);
  const res = await getJson(`/api/runs/${source}/checkpoints/2/diff`);
  assert.equal(res.status, 200);
  const diff = await res.json();
  assert.equal(diff.seq, 2);
  const greet = diff.files.find((f: any) => f.path === 'src/greet.ts');
  assert.deepEqual({ added: greet.added, deleted: greet.deleted }, { added: 1, deleted: 1 });
  assert.match(greet.diff, /^-export const greet = \(n: string\) => `hello \$\{n\}`;$/m);
  assert.match(greet.diff, /^\+export const greet = \(n: string\) => `hi \$\{n\}`;$/m);
  assert.deepEqual(
    diff.toolCalls.map((c: any) => c.tool),
    ['write_file', 'write_file'],
    "the two calls of round 2, not round 1's",
  );
  assert.equal(JSON.stringify(diff).includes('sk-live-0123456789abcdef0123456789'), false, 'the secret is redacted');
  assert.equal(diff.truncated, false);
  assert.equal((await getJson(`/api/runs/${source}/checkpoints/9/diff`)).status, 404);
  assert.equal((await getJson(`/api/runs/${source}/checkpoints/2/diff`, otherToken)).status, 404);
  await post(`/api/runs/${source}/cancel`, {});

  const big = (await s.dispatch({ model: bigModel })).agentRunId;
  await s.waitForStatus(big, 'completed', 120_000);
  const cut = await (await getJson(`/api/runs/${big}/checkpoints/1/diff`)).json();
  assert.equal(cut.truncated, true, 'a diff over the cap is marked truncated');
  const file = cut.files.find((f: any) => f.path === 'big.txt');
  assert.equal(file.added, 6000, 'the line counts are whole');
  assert.ok(file.diff.length <= 64 * 1024, 'the text is capped');
});

test('fork and retry from the API, each continued by a real worker', async () => {
  const { agentRunId: source } = await s.dispatch({ model: quickModel });
  await s.waitForStatus(source, 'completed', 120_000);
  for (const bad of [{}, { at: 0 }, { at: '1; drop' }, { at: 1, extra: true }, { at: 1, brief: 7 }]) {
    assert.equal((await post(`/api/runs/${source}/fork`, bad)).status, 400, JSON.stringify(bad));
  }
  assert.equal((await post(`/api/runs/${source}/fork`, { at: 5 })).status, 404);
  const res = await post(`/api/runs/${source}/fork`, { at: 1, model: quickModel, brief: 'Again, differently.' });
  assert.equal(res.status, 200);
  const fork = await res.json();
  assert.match(fork.branch, /^echodo\//);
  const forked = await s.waitForStatus(fork.agentRunId, 'completed', 120_000);
  assert.equal(forked.forked_from_run, source);
  assert.equal(forked.job.brief, 'Again, differently.');

  // Retry: a run whose worker died and that the stall detector gave up on.
  const { agentRunId: failing } = await s.dispatch({ model: quickModel });
  await s.waitForStatus(failing, 'completed', 120_000);
  await s.su`update agent_runs set status = 'failed', failure_reason = 'test: worker lost' where id = ${failing}`;
  const retried = await post(`/api/runs/${failing}/retry`, {});
  assert.equal(retried.status, 200);
  assert.equal((await retried.json()).outcome, 'redispatched');
  const again = await s.waitForStatus(failing, 'completed', 120_000);
  assert.equal(again.attempt, 2);
  assert.equal((await post(`/api/runs/${failing}/retry`, {})).status, 409, 'a completed run is refused');
});

test('cookie-authenticated writes need the CSRF token and the same origin', async () => {
  const { agentRunId } = await s.dispatch({ model: quickModel });
  await s.waitForStatus(agentRunId, 'completed', 120_000);
  const cookie = { cookie: `emc_token=${token}` };
  const origin = { origin: server.url };
  const csrf = csrfTokenFor(token);
  const at = `/api/runs/${agentRunId}/fork`;
  assert.equal((await post(at, { at: 1, model: quickModel }, { ...cookie, ...origin })).status, 403, 'no CSRF token');
  assert.equal(
    (await post(at, { at: 1, model: quickModel }, { ...cookie, ...origin, 'x-csrf-token': 'wrong' })).status,
    403,
  );
  assert.equal(
    (await post(at, { at: 1, model: quickModel }, { ...cookie, origin: 'http://evil.example', 'x-csrf-token': csrf }))
      .status,
    403,
    'foreign origin',
  );
  assert.equal(
    (await post(at, { at: 1, model: quickModel }, { ...cookie, 'x-csrf-token': csrf })).status,
    403,
    'no origin at all',
  );
  const ok = await post(at, { at: 1, model: quickModel }, { ...cookie, ...origin, 'x-csrf-token': csrf });
  assert.equal(ok.status, 200);
  // The page's form: same token, form-encoded; first a preview, then, confirmed, a redirect to the new run.
  const formPost = (extra: Record<string, string>) =>
    fetch(`${server.url}/runs/${agentRunId}/actions/fork`, {
      method: 'POST',
      headers: { ...cookie, ...origin, 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ _csrf: csrf, at: '1', model: quickModel, ...extra }),
      redirect: 'manual',
    });
  const preview = await formPost({});
  assert.equal(preview.status, 200);
  assert.match(await preview.text(), /data-testid="fork-preview"/);
  const form = await formPost({ confirmed: 'yes' });
  assert.equal(form.status, 303);
  assert.match(form.headers.get('location') ?? '', /^\/runs\//);
  const page = await (await fetch(`${server.url}/runs/${agentRunId}`, { headers: cookie })).text();
  assert.ok(page.includes(`value="${csrf}"`), 'the run page carries the CSRF token in its forms');
  assert.ok(page.includes('data-testid="fork-1"'), 'and offers "Fork from here"');
});

test('in Chromium: sign in, open a run, open the diff of checkpoint 2, fork from it and watch the fork progress live; a cross-site form POST is refused; rewind a running run', async () => {
  const output = path.resolve(PROJECT_ROOT, process.env.ECHODO_TEST_OUTPUT ?? 'test-output', 'mission-control');
  await mkdir(output, { recursive: true });
  const dir = path.dirname(s.transcriptPath);
  await writeFile(
    path.join(dir, 'three.json'),
    JSON.stringify({
      steps: [
        write('src/a.ts', 'export const a = 1;\n'),
        write('src/b.ts', 'export const b = 2;\n'),
        write('src/c.ts', 'export const c = 3;\n'),
        { text: 'ok' },
      ],
    }),
  );
  // The fork's model: rounds 3 to 6 (it starts after the source's step 2), slow enough to watch.
  const slow = [1, 2]
    .map((i) => write(`never-${i}.txt`, 'x\n'))
    .concat([3, 4, 5, 6].map((i) => write(`src/fork-${i}.ts`, `export const f = ${i};\n`, 700)));
  await writeFile(path.join(dir, 'fork-slow.json'), JSON.stringify({ steps: [...slow, { text: 'ok' }] }));
  const { agentRunId: source } = await s.dispatch({ model: `replay:${path.join(dir, 'three.json')}` });
  await s.waitForStatus(source, 'completed', 120_000);
  // The fork keeps the source's model unless told: point the source's job at the slow one.
  await s.su`update agent_runs set job = jsonb_set(job, '{model}', to_jsonb(${`replay:${path.join(dir, 'fork-slow.json')}`}::text)) where id = ${source}`;

  const evil: Server = createServer((req, res) => {
    res.setHeader('content-type', 'text/html');
    res.end(
      `<form id="f" method="post" action="${server.url}/runs/${source}/actions/fork"><input name="at" value="1"><input name="_csrf" value="guess"></form><script>document.getElementById('f').submit()</script>`,
    );
  });
  await new Promise<void>((resolve) => evil.listen(0, '127.0.0.1', resolve));
  const browser = await launchChromium();
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    await signInAt(page, server.url, token);
    await page.goto(`${server.url}/runs/${source}`);
    await page.click('[data-testid="diff-2"]');
    await page.waitForSelector('[data-testid="diff-files"]');
    assert.match(await page.locator('[data-testid="diff-files"]').innerText(), /src\/b\.ts[\s\S]*\+1/);
    assert.match(await page.locator('[data-testid="tool-calls"]').innerText(), /write_file/);
    const convoyId = (await s.run(source)).convoy_id as string;
    assert.equal(
      await page.locator(`[data-testid="crumbs"] a[href="/convoys/${convoyId}"]`).count(),
      1,
      'the breadcrumb keeps the convoy',
    );
    assert.equal(await page.getAttribute('[data-testid="diff-prev"]', 'href'), `/runs/${source}/checkpoints/1`);
    assert.equal(await page.getAttribute('[data-testid="diff-next"]', 'href'), `/runs/${source}/checkpoints/3`);
    await page.screenshot({ path: path.join(output, 'diff.png'), fullPage: true });
    // The diff page and the fork's preview fit a 390 px screen too.
    const fits = () => page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth);
    await page.setViewportSize({ width: 390, height: 844 });
    assert.ok(await fits(), 'the diff page fits 390 px');
    await page.goBack();

    const runsBefore = (await s.su`select count(*)::int as n from agent_runs where forked_from_run = ${source}`)[0]!.n;
    await page.click('[data-testid="fork-2"]');
    // The preview: what differs between checkpoint 2 and the tip (checkpoint 3 wrote src/c.ts), the branch kept.
    await page.waitForSelector('[data-testid="fork-preview"]');
    assert.ok(await fits(), 'the fork preview fits 390 px');
    await page.setViewportSize({ width: 1280, height: 900 });
    assert.match(await page.locator('[data-testid="fork-preview-files"]').innerText(), /A\s+src\/c\.ts/);
    assert.match(await page.locator('[data-testid="fork-preview-branch"]').innerText(), /is kept/);
    const [srcCount] = await s.su`select count(*)::int as n from agent_runs where forked_from_run = ${source}`;
    assert.equal(srcCount!.n, runsBefore, 'the preview forks nothing');
    await Promise.all([
      page.waitForURL((u) => u.pathname.startsWith('/runs/') && !u.pathname.includes(source)),
      page.click('[data-testid="confirm-yes"]'),
    ]);
    const forkId = decodeURIComponent(new URL(page.url()).pathname.split('/')[2]!);
    assert.equal((await s.run(forkId)).forked_from_run, source, 'the page of the new run');
    await page.waitForSelector('[data-testid="live-status"][data-state="live"]');
    // No reload from here on: the count rises and the status turns completed as the worker goes.
    await page.waitForFunction(
      () => Number(document.querySelector('[data-testid="run-checkpoint-count"]')?.textContent) >= 1,
      null,
      { timeout: 120_000 },
    );
    const seen = Number(await page.locator('[data-testid="run-checkpoint-count"]').innerText());
    await page.waitForFunction(
      () => document.querySelector('[data-field="status"]')?.textContent === 'completed',
      null,
      { timeout: 120_000 },
    );
    assert.ok(
      Number(await page.locator('[data-testid="run-checkpoint-count"]').innerText()) >= Math.max(seen, 4),
      'progressed live to 4 checkpoints',
    );
    await page.screenshot({ path: path.join(output, 'fork.png'), fullPage: true });

    // A page of another origin posts a form at the panel with the signed-in cookie: refused.
    const evilUrl = `http://127.0.0.1:${(evil.address() as AddressInfo).port}/`;
    const answer = page.waitForResponse((r) => r.url().includes('/actions/fork'));
    await page.goto(evilUrl);
    assert.equal((await answer).status(), 403);
    const runsAfter = (await s.su`select count(*)::int as n from agent_runs where forked_from_run = ${source}`)[0]!.n;
    assert.equal(runsAfter, runsBefore + 1, "only the panel's own fork made a run");

    // A read-only token reads the same run and sees no action buttons; the API answers 403.
    const reader = await browser.newPage();
    await reader.goto(`${server.url}/login`);
    await reader.fill('#token', readOnlyToken);
    await Promise.all([reader.waitForURL(`${server.url}/`), reader.click('button[type=submit]')]);
    await reader.goto(`${server.url}/runs/${source}`);
    await reader.waitForSelector('[data-testid="diff-2"]');
    assert.equal(await reader.locator('form.action').count(), 0, 'no forms for a read-only token');
    for (const action of ['fork', 'retry', 'cancel']) {
      const res = await post(`/api/runs/${source}/${action}`, { at: 1 }, { authorization: `Bearer ${readOnlyToken}` });
      assert.equal(res.status, 403, `${action} with a read-only token`);
    }
    assert.equal(
      (await getJson(`/api/runs/${source}/checkpoints/2/diff`, readOnlyToken)).status,
      200,
      'it still reads',
    );
    assert.equal(await reader.locator('[data-testid^="rewind-"]').count(), 0);

    // Rewind a running run to checkpoint 1: the preview names what checkpoint 2 changed and that the run is cancelled.
    const { agentRunId: live } = await s.dispatch();
    await checkpointsOf(live, 2);
    await page.goto(`${server.url}/runs/${live}`);
    await page.click('[data-testid="rewind-1"]');
    await page.waitForSelector('[data-testid="fork-preview"]');
    const files = await page.locator('[data-testid="fork-preview-files"]').innerText();
    assert.match(files, /M\s+src\/greet\.ts/);
    assert.match(files, /A\s+notes\/secret\.txt/);
    assert.match(await page.locator('[data-testid="confirm"]').innerText(), /the rewind discards them/);
    assert.match(await page.locator('[data-testid="fork-preview-branch"]').innerText(), /source run is cancelled/);
    assert.equal((await s.run(live)).status, 'running', 'the preview rewinds nothing');
    await Promise.all([
      page.waitForURL((u) => u.pathname.startsWith('/runs/') && !u.pathname.includes(live)),
      page.click('[data-testid="confirm-yes"]'),
    ]);
    const rewound = decodeURIComponent(new URL(page.url()).pathname.split('/')[2]!);
    assert.equal((await s.run(rewound)).forked_from_run, live);
    const cancelled = await s.waitForStatus(live, 'cancelled', 120_000);
    assert.match(cancelled.cancel_requested_by, /^panel:/);
    await post(`/api/runs/${rewound}/cancel`, {});
  } finally {
    await browser.close();
    evil.close();
  }
});
