// Agent adapters in mission control: Settings → Harnesses lists the built-in harnesses, adds a remote
// harness whose Test shows ok against a real AG-UI agent on loopback and the error against a dead
// port, and removes one, in real Chromium.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { Browser } from 'playwright-core';
import { createMissionControl, type RunningMissionControl } from '../mission-control/server.ts';
import { createWorkspace } from '../store/runs.ts';
import { createWorkspaceToken } from '../store/tokens.ts';
import { withWorkspace } from '../store/workspace.ts';
import { createLogger } from '../worker/log.ts';
import { createTestDatabase, type TestDatabase } from '../testbed/db.ts';
import { startAgUiAgent, type AgUiAgent } from './support/ag-ui-agent.ts';
import { launchChromium } from './support/browser.ts';

const WS = 'acme';
let t: TestDatabase;
let agent: AgUiAgent;
let server: RunningMissionControl;
let browser: Browser;
let token: string;

before(async () => {
  t = await createTestDatabase();
  await withWorkspace(t.db.app, WS, (tx) => createWorkspace(tx));
  token = await createWorkspaceToken(t.db.app, WS);
  agent = await startAgUiAgent({ hello: [{ text: 'ok' }] });
  server = await createMissionControl({ db: t.db, config: t.config, logger: createLogger({ level: 'silent' }) }).start(
    0,
  );
  browser = await launchChromium();
});
after(async () => {
  await browser?.close();
  await server?.close();
  await agent?.close();
  await t?.drop();
});

test('Settings → Harnesses: add a remote harness; Test shows ok, then the error of a dead port', async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  await page.goto(`${server.url}/login`);
  await page.fill('#token', token);
  await Promise.all([page.waitForURL(`${server.url}/`), page.click('button[type=submit]')]);
  await page.goto(`${server.url}/settings`);
  // The built-in harnesses are listed too, run by the worker's own loop.
  assert.match(await page.locator('tr[data-harness="code"]').innerText(), /built-in[\s\S]*minimal/);
  const form = page.locator('form[action="/settings/harnesses"]');
  const add = async (alias: string, url: string) => {
    await form.locator('[name=alias]').fill(alias);
    await form.locator('[name=adapter]').selectOption('remote-ag-ui');
    await form.locator('[name=url]').fill(url);
    await Promise.all([page.waitForURL(`${server.url}/settings`), form.locator('button').click()]);
  };
  await add('remote', agent.url('hello'));
  assert.match(await page.locator('tr[data-harness="remote"]').innerText(), /remote-ag-ui/);
  await page.click('[data-testid="test-harness-remote"]');
  assert.match(await page.locator('[data-testid="test-result-remote"]').innerText(), /ok · \d+ ms/);
  assert.equal(agent.inputs.get('hello')?.length, 1, 'one probe run reached the agent');

  await add('dead', agent.url('hello').replace(/:\d+\//, ':9/'));
  await page.click('[data-testid="test-harness-dead"]');
  assert.match(await page.locator('[data-testid="test-result-dead"]').innerText(), /error: .*could not be reached/);
  // A built-in has its Test too: the worker's own loop, nothing remote to reach.
  await page.click('[data-testid="test-harness-doc-writer"]');
  assert.match(await page.locator('[data-testid="test-result-doc-writer"]').innerText(), /ok · the worker's own/);

  // A remote adapter without its URL is refused with the reason.
  await form.locator('[name=alias]').fill('nourl');
  await form.locator('[name=adapter]').selectOption('crewai');
  await form.locator('[name=url]').fill('');
  await form.locator('button').click();
  assert.match(await page.locator('[data-testid="settings-error"]').innerText(), /needs the agent's AG-UI endpoint/);

  const api = (await (
    await fetch(`${server.url}/api/settings`, { headers: { authorization: `Bearer ${token}` } })
  ).json()) as { harnesses: { alias: string; adapter: string }[] };
  assert.deepEqual(
    api.harnesses.map((h) => [h.alias, h.adapter]),
    [
      ['dead', 'remote-ag-ui'],
      ['remote', 'remote-ag-ui'],
    ],
  );
  const probe = await fetch(`${server.url}/api/harnesses/remote/test`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}` },
  });
  assert.equal(((await probe.json()) as { ok: boolean }).ok, true);

  // Remove, confirmed: the row goes, the other stays.
  await page.goto(`${server.url}/settings`);
  await page.click('[data-testid="rm-harness-dead"]');
  await Promise.all([page.waitForURL(`${server.url}/settings`), page.click('[data-testid="confirm-yes"]')]);
  await page.locator('tr[data-harness="remote"]').waitFor();
  assert.equal(await page.locator('tr[data-harness="dead"]').count(), 0);
  const left = (await (
    await fetch(`${server.url}/api/settings`, { headers: { authorization: `Bearer ${token}` } })
  ).json()) as { harnesses: { alias: string }[] };
  assert.deepEqual(
    left.harnesses.map((h) => h.alias),
    ['remote'],
  );
});
