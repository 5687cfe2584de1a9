// Settings, managed: `npm run workspace -- model|harness|route …` and the Settings page in real
// Chromium. A model pointing at a loopback OpenAI-compatible server tests ok; with the server
// stopped the Test shows the error; bad input is refused with the reason; the key is never in
// the page, the API, the command's output or the logs.
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { after, before, test } from 'node:test';
import type { Browser } from 'playwright-core';
import { createMissionControl, type RunningMissionControl } from '../mission-control/server.ts';
import { createWorkspace } from '../store/runs.ts';
import { createWorkspaceToken } from '../store/tokens.ts';
import { withWorkspace } from '../store/workspace.ts';
import { createLogger } from '../worker/log.ts';
import { spawnNode } from './support/child.ts';
import { startChatServer, type ChatServer } from './support/chat-server.ts';
import { createTestDatabase, superuserSql, type TestDatabase } from '../testbed/db.ts';
import { grantKey } from './support/grants.ts';
import { launchChromium } from './support/browser.ts';

const KEY_VAR = 'SETTINGS_TEST_API_KEY';
const KEY = 'sk-settings-test-d41d8cd98f00b204e9800998ecf8427e';
const WS = 'acme';

let t: TestDatabase;
let chat: ChatServer;
let server: RunningMissionControl;
let browser: Browser;
let token: string;
const logs: string[] = [];

before(async () => {
  process.env[KEY_VAR] = KEY;
  t = await createTestDatabase();
  await withWorkspace(t.db.app, WS, (tx) => createWorkspace(tx));
  const su = superuserSql(t.url);
  await grantKey(su, WS, KEY_VAR).finally(() => su.end({ timeout: 2 }));
  token = await createWorkspaceToken(t.db.app, WS);
  chat = await startChatServer([{ text: 'ok' }, { text: 'ok' }, { text: 'ok' }]);
  const destination = new Writable({ write: (chunk, _enc, done) => (logs.push(String(chunk)), done()) });
  server = await createMissionControl({
    db: t.db,
    config: { ...t.config, LOG_LEVEL: 'info' },
    logger: createLogger({ level: 'debug', destination }),
  }).start(0);
  browser = await launchChromium();
});
after(async () => {
  await browser?.close();
  await server?.close();
  await chat?.close().catch(() => {});
  await t?.drop();
  delete process.env[KEY_VAR];
});

async function cli(args: string[]) {
  const child = spawnNode('scripts/workspace.ts', args, { env: { ...t.env, [KEY_VAR]: KEY } });
  const { code } = await child.exited;
  return { code, out: child.stdout.join('\n'), err: child.stderr.join('\n') };
}

test('npm run workspace: harness, route and model add|list|rm|test; bad input refused with the reason', async () => {
  assert.equal(
    (await cli(['harness', 'add', WS, '--alias', 'lint', '--allow', 'npm run lint', '--write-prefix', 'src/'])).code,
    0,
  );
  assert.match((await cli(['harness', 'list', WS])).out, /"alias":"lint".*"npm run lint"/);
  assert.equal((await cli(['route', 'add', WS, '--role', 'linter', '--harness', 'lint'])).code, 0);
  assert.match((await cli(['route', 'list', WS])).out, /"role":"linter","harness":"lint"/);
  assert.equal((await cli(['route', 'rm', WS, '--role', 'linter'])).code, 0);
  assert.equal((await cli(['route', 'rm', WS, '--role', 'linter'])).code, 2, 'nothing left to remove');
  assert.equal((await cli(['harness', 'rm', WS, '--alias', 'lint'])).code, 0);

  const add = await cli([
    'model',
    'add',
    WS,
    '--alias',
    'local',
    '--base-url',
    chat.baseURL,
    '--model',
    'tiny',
    '--key-env',
    KEY_VAR,
  ]);
  assert.equal(add.code, 0, add.err);
  const tested = await cli(['model', 'test', WS, '--alias', 'local']);
  assert.equal(tested.code, 0, tested.err);
  assert.match(tested.out, /"ok":true/);
  const sent = chat.requests.at(-1)!;
  assert.equal(sent.headers.authorization, `Bearer ${KEY}`, 'the key went to the provider, and only there');
  assert.ok([sent.body.max_tokens, sent.body.max_completion_tokens].includes(1), 'a one-token completion');
  assert.match((await cli(['model', 'list', WS])).out, new RegExp(`"keyEnv":"${KEY_VAR}"`));

  for (const [args, reason] of [
    [['model', 'add', WS, '--alias', 'x', '--base-url', 'ftp://h/v1', '--model', 'm'], /http or https/],
    [['model', 'add', WS, '--alias', 'x', '--base-url', 'not a url', '--model', 'm'], /not a URL/],
    [
      ['model', 'add', WS, '--alias', 'x', '--base-url', chat.baseURL, '--model', 'm', '--provider', 'gemini'],
      /unknown kind "gemini"/,
    ],
    [
      ['model', 'add', WS, '--alias', 'x', '--base-url', chat.baseURL, '--model', 'm', '--key-env', 'DATABASE_URL'],
      /WORKER_PROVIDER_KEY_VARS/,
    ],
    [['frobnicate', WS], /unknown command/],
  ] as const) {
    const r = await cli([...args]);
    assert.equal(r.code, 2, `${args.join(' ')}: ${r.err}`);
    assert.match(r.err, reason);
  }
  for (const r of [add, tested])
    assert.equal(`${r.out}${r.err}`.includes(KEY), false, "the key is not in the command's output");
});

test('the Settings page: add a model, Test shows ok; server stopped, Test shows the error; the key appears nowhere', async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  await page.goto(`${server.url}/login`);
  await page.fill('#token', token);
  await Promise.all([page.waitForURL(`${server.url}/`), page.click('button[type=submit]')]);
  await Promise.all([page.waitForURL(`${server.url}/settings`), page.click('[data-testid="settings-link"]')]);

  const form = page.locator('form[action="/settings/models"]');
  await form.locator('[name=alias]').fill('panel');
  await form.locator('[name=baseUrl]').fill(chat.baseURL);
  await form.locator('[name=model]').fill('tiny');
  await form.locator('[name=keyEnv]').fill(KEY_VAR);
  await Promise.all([page.waitForURL(`${server.url}/settings`), form.locator('button').click()]);
  await page.click('[data-testid="test-panel"]');
  assert.match(await page.locator('[data-testid="test-result-panel"]').innerText(), /ok · \d+ ms/);
  assert.equal((await page.content()).includes(KEY), false, 'the key is not in the page');

  // A bad URL is refused with the reason.
  await form.locator('[name=alias]').fill('bad');
  await form.locator('[name=baseUrl]').fill('file:///etc/passwd');
  await form.locator('[name=model]').fill('m');
  await form.locator('button').click();
  assert.match(await page.locator('[data-testid="settings-error"]').innerText(), /http or https/);

  await chat.close();
  await page.goto(`${server.url}/settings`);
  await page.click('[data-testid="test-panel"]');
  const failed = await page.locator('[data-testid="test-result-panel"]').innerText();
  assert.match(failed, /error: .*(ECONNREFUSED|connect|fetch)/i, failed);
  assert.equal((await page.content()).includes(KEY), false);

  // Without the key in its environment, the Test names the process that lacks it: this one, not a worker.
  delete process.env[KEY_VAR];
  try {
    await page.goto(`${server.url}/settings`);
    await page.click('[data-testid="test-panel"]');
    const unset = await page.locator('[data-testid="test-result-panel"]').innerText();
    assert.match(unset, new RegExp(`${KEY_VAR} is not set in the environment of \\S+ \\(pid ${process.pid}\\)`), unset);
    assert.doesNotMatch(unset, /worker/);
  } finally {
    process.env[KEY_VAR] = KEY;
  }

  const apiRes = await fetch(`${server.url}/api/settings`, { headers: { authorization: `Bearer ${token}` } });
  const api = await apiRes.text();
  assert.match(api, /"alias":"panel"/);
  const apiTest = await (
    await fetch(`${server.url}/api/models/panel/test`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}` },
    })
  ).text();
  assert.match(apiTest, /"ok":false/);
  for (const text of [api, apiTest, logs.join('')])
    assert.equal(text.includes(KEY), false, 'the key is not in the API or the logs');
});

test('the Settings page: set and remove a price, set the daily cap, with labelled fields; bad amounts refused', async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  await page.goto(`${server.url}/login`);
  await page.fill('#token', token);
  await Promise.all([page.waitForURL(`${server.url}/`), page.click('button[type=submit]')]);
  await page.goto(`${server.url}/settings`);
  assert.match(await page.locator('[data-testid="daily-cap"]').innerText(), /Daily cap: none/);

  const form = page.locator('form[action="/settings/prices"]');
  const labels = await form.locator('label.field > span').allInnerTexts();
  assert.deepEqual(labels, [
    'Model',
    'Input per million',
    'Output per million',
    'Cache read per million',
    'Cache write per million',
  ]);
  await form.getByLabel('Model').fill('claude-sonnet-4-5');
  await form.getByLabel('Input per million').fill('lots');
  await form.getByLabel('Output per million').fill('12');
  await form.locator('button').click();
  assert.match(await page.locator('[data-testid="settings-error"]').innerText(), /Input per million: "lots" is not/);

  await form.getByLabel('Model').fill('claude-sonnet-4-5');
  await form.getByLabel('Input per million').fill('2');
  await form.getByLabel('Output per million').fill('12');
  await Promise.all([page.waitForURL(`${server.url}/settings`), form.locator('button').click()]);
  const row = page.locator('[data-testid="prices"] tr[data-price="claude-sonnet-4-5"]');
  assert.deepEqual((await row.locator('td').allInnerTexts()).slice(0, 5), [
    'claude-sonnet-4-5',
    '$2',
    '$12',
    'as input',
    'as input',
  ]);
  assert.match(
    (await page.locator('[data-testid="shipped-prices"] tr[data-price="claude-sonnet-4-5"]').textContent()) ?? '',
    /overridden/,
    'the shipped row it overrides says so (inside the closed details)',
  );

  const cap = page.locator('form[action="/settings/budget"]');
  await cap.getByLabel('Daily cap (USD)').fill('7.5');
  await Promise.all([page.waitForURL(`${server.url}/settings`), cap.locator('button').click()]);
  assert.match(await page.locator('[data-testid="daily-cap"]').innerText(), /Daily cap: \$7\.50; spent today/);

  await page.click('[data-testid="rm-price-claude-sonnet-4-5"]');
  await page.waitForSelector('[data-testid="confirm"]');
  await Promise.all([page.waitForURL(`${server.url}/settings`), page.click('[data-testid="confirm-yes"]')]);
  assert.match(await page.locator('[data-testid="prices"]').innerText(), /No prices of this workspace/);

  const api = (await (
    await fetch(`${server.url}/api/settings`, { headers: { authorization: `Bearer ${token}` } })
  ).json()) as { prices: unknown[]; dailyCapUsd: number };
  assert.deepEqual([api.prices, api.dailyCapUsd], [[], 7.5]);
  await page.close();
});
