// Doc runs end in review, with a real worker, Postgres and mission control over HTTP: a doc-writer
// run's brief ends doc_review with the files it wrote and their sha256; `npm run publish` (a real
// process) publishes it, and refuses what is not in review; `retry --note` sends it back (the same
// run retried, the note in its brief); the panel's Publish and Send back (in Chromium) confirm first,
// and a read-only token may do neither.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { createMissionControl, type RunningMissionControl } from '../mission-control/server.ts';
import { csrfTokenFor } from '../mission-control/routes-actions.ts';
import { createWorkspaceToken } from '../store/tokens.ts';
import { recordUsage, setQuota } from '../store/storage.ts';
import { withWorkspace } from '../store/workspace.ts';
import { PROJECT_ROOT } from '../core/config.ts';
import { spawnNode, waitFor, type Child } from './support/child.ts';
import { createScenario, type Scenario, type TranscriptStep } from './support/scenario.ts';
import { launchChromium, signInAt } from './support/browser.ts';

const DOC = '# X\n\nHow x works.\n';
const DOC_Y = '# Y\n\nHow y works, written after the reviewer asked.\n';
const write = (file: string, content: string): TranscriptStep => ({
  toolCalls: [{ toolName: 'write_file', input: { path: file, content } }],
});
const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

let s: Scenario;
let worker: Child;
let server: RunningMissionControl;
let token: string;
let readOnlyToken: string;

before(async () => {
  s = await createScenario({ steps: [write('docs/x.md', DOC), { text: 'Docs written.' }] });
  worker = s.spawnWorker();
  token = await createWorkspaceToken(s.t.db.app, s.workspaceId);
  readOnlyToken = await createWorkspaceToken(s.t.db.app, s.workspaceId, { readOnly: true });
  server = await createMissionControl({
    db: s.t.db,
    config: { ...s.config, LOG_LEVEL: 'silent' },
    queue: s.queue,
  }).start(0);
});
after(async () => {
  await worker?.stop('SIGTERM', 5000);
  await server?.close();
  await s?.close();
});

async function cli(script: string, args: string[]) {
  const child = spawnNode(script, ['--workspace', s.workspaceId, ...args], { env: s.env });
  const { code } = await child.exited;
  const line = child.stdout.find((l) => l.startsWith('{'));
  return { code, out: line ? JSON.parse(line) : undefined, err: child.stderr.join('\n') };
}

/** The run completed at this attempt (a send-back is attempt + 1). */
function completed(agentRunId: string, attempt = 1) {
  return waitFor(
    async () => {
      const row = await s.run(agentRunId);
      if (row.status === 'failed') throw new Error(`run failed: ${row.failure_reason}`);
      return row.status === 'completed' && row.attempt === attempt ? row : undefined;
    },
    { timeoutMs: 60_000, what: `run ${agentRunId} completed at attempt ${attempt}` },
  ).catch((err: Error) => {
    throw new Error(`${err.message}\nworker output:\n${worker.output()}`);
  });
}

const briefOf = async (agentRunId: string) =>
  (await s.su`select b.* from briefs b join agent_runs r on r.brief_id = b.id where r.id = ${agentRunId}`)[0]!;

test('a doc-writer run ends in doc_review with its files and hashes; publish and send back from the command line', async () => {
  const docRun = (await s.dispatch({ harnessAlias: 'doc-writer', roleId: 'writer' })).agentRunId;
  await completed(docRun);
  const brief = await briefOf(docRun);
  assert.equal(brief.status, 'doc_review');
  assert.equal(brief.claimed_by_run, docRun);
  const [review] = await s.events(docRun, 'doc_review');
  assert.deepEqual(review?.metadata.files, [{ path: 'docs/x.md', sha256: sha256(DOC) }]);
  assert.equal(review?.metadata.fileCount, 1);

  // Control: a code run's brief ends done, and is not published.
  const codeRun = (await s.dispatch()).agentRunId;
  await completed(codeRun);
  assert.equal((await briefOf(codeRun)).status, 'done');
  const notInReview = await cli('scripts/publish.ts', ['--run', codeRun]);
  assert.equal(notInReview.code, 3, notInReview.err);
  assert.match(notInReview.err, /is not in review: its brief .* is done/);
  const unknown = await cli('scripts/publish.ts', ['--run', 'no-such-run']);
  assert.equal(unknown.code, 2, unknown.err);
  assert.match(unknown.err, /run no-such-run not found/);
  assert.equal((await cli('scripts/retry.ts', ['--run', docRun, '--note', ' '])).code, 2, 'an empty note');
  assert.equal((await cli('scripts/retry.ts', ['--run', codeRun, '--note', 'More.'])).code, 3);

  // Over the storage quota a send-back is refused like any start, and the run stays in review.
  await withWorkspace(s.t.db.app, s.workspaceId, (tx) => setQuota(tx, 1).then(() => recordUsage(tx, 2, 0)));
  const overQuota = await cli('scripts/retry.ts', ['--run', docRun, '--note', 'Over quota.']);
  assert.equal(overQuota.code, 3, overQuota.err);
  assert.match(overQuota.err, /over its storage quota/);
  assert.equal((await briefOf(docRun)).status, 'doc_review');
  await withWorkspace(s.t.db.app, s.workspaceId, (tx) => setQuota(tx, null));

  // Sent back: the same run, attempt 2, the note in its brief; its next round writes docs/y.md.
  const again = path.join(path.dirname(s.transcriptPath), 'again.json');
  await writeFile(
    again,
    JSON.stringify({ steps: [write('docs/x.md', DOC), write('docs/y.md', DOC_Y), { text: 'ok' }] }),
  );
  await s.su`update agent_runs set job = jsonb_set(job, '{model}', to_jsonb(${`replay:${again}`}::text)) where id = ${docRun}`;
  const sent = await cli('scripts/retry.ts', ['--run', docRun, '--note', 'Add a page on y.']);
  assert.equal(sent.code, 0, sent.err);
  assert.deepEqual(
    { agentRunId: sent.out.agentRunId, outcome: sent.out.outcome },
    { agentRunId: docRun, outcome: 'redispatched' },
  );
  const [back] = await s.events(docRun, 'doc_sent_back');
  assert.equal(back?.metadata.note, 'Add a page on y.');
  const resumed = await completed(docRun, 2);
  assert.match(resumed.job.brief, /^Add a greeting module[\s\S]*\n\nReviewer's note [^\n]*: Add a page on y\.$/);
  assert.equal((await briefOf(docRun)).status, 'doc_review', 'back in review');
  const files = [
    { path: 'docs/x.md', sha256: sha256(DOC) },
    { path: 'docs/y.md', sha256: sha256(DOC_Y) },
  ];
  assert.deepEqual((await s.events(docRun, 'doc_review')).at(-1)?.metadata.files, files);

  const published = await cli('scripts/publish.ts', ['--run', docRun]);
  assert.equal(published.code, 0, published.err);
  assert.deepEqual(published.out, { agentRunId: docRun, briefId: brief.id, status: 'published', fileCount: 2, files });
  const publishedBrief = await briefOf(docRun);
  assert.equal(publishedBrief.status, 'published');
  assert.equal(publishedBrief.published_by, 'cli');
  const [event] = await s.events(docRun, 'doc_published');
  assert.deepEqual(event?.metadata.files, files);
  const twice = await cli('scripts/publish.ts', ['--run', docRun]);
  assert.equal(twice.code, 3, twice.err);
  assert.match(twice.err, /is published/);
  assert.equal((await cli('scripts/retry.ts', ['--run', docRun, '--note', 'Too late.'])).code, 3);
});

test('the panel, in Chromium at 390 px: the files and hashes; Send back and Publish each confirm first; read-only tokens get 403', async () => {
  const runId = (await s.dispatch({ harnessAlias: 'doc-writer', roleId: 'writer' })).agentRunId;
  await completed(runId);
  const api = (action: string, body: unknown, who = token) =>
    fetch(`${server.url}/api/runs/${runId}/${action}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${who}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });

  const readOnlyPage = await (
    await fetch(`${server.url}/runs/${runId}`, { headers: { cookie: `emc_token=${readOnlyToken}` } })
  ).text();
  assert.ok(readOnlyPage.includes(sha256(DOC)), 'a read-only token sees the files');
  assert.ok(!readOnlyPage.includes('data-testid="publish"'), 'and no Publish');
  const json = await (
    await fetch(`${server.url}/api/runs/${runId}`, { headers: { authorization: `Bearer ${token}` } })
  ).json();
  assert.equal(json.docReview.briefStatus, 'doc_review');
  assert.deepEqual(json.docReview.files, [{ path: 'docs/x.md', sha256: sha256(DOC) }]);
  for (const action of ['publish', 'send-back']) {
    assert.equal((await api(action, { note: 'x' }, readOnlyToken)).status, 403, `${action}, read-only API`);
    const form = await fetch(`${server.url}/runs/${runId}/actions/${action}`, {
      method: 'POST',
      headers: {
        cookie: `emc_token=${readOnlyToken}`,
        origin: server.url,
        'content-type': 'application/x-www-form-urlencoded',
      },
      body: new URLSearchParams({ _csrf: csrfTokenFor(readOnlyToken), note: 'x', confirmed: 'yes' }),
      redirect: 'manual',
    });
    assert.equal(form.status, 403, `${action}, read-only form`);
  }
  assert.equal((await api('send-back', { note: '' })).status, 400, 'an empty note');
  assert.equal((await api('send-back', { note: 'x', extra: 1 })).status, 400, 'an unknown field');
  assert.equal((await briefOf(runId)).status, 'doc_review', 'nothing refused changed the brief');

  const browser = await launchChromium();
  try {
    const page = await browser.newPage({ viewport: { width: 390, height: 844 } });
    await signInAt(page, server.url, token);
    await page.goto(`${server.url}/runs/${runId}`);
    const files = await page.locator('[data-testid="doc-files"]').innerText();
    assert.ok(files.includes('docs/x.md') && files.includes(sha256(DOC)), files);
    const fits = () => page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth);
    assert.ok(await fits(), 'the run page fits 390 px');
    const output = path.resolve(PROJECT_ROOT, process.env.ECHODO_TEST_OUTPUT ?? 'test-output', 'mission-control');
    await mkdir(output, { recursive: true });
    await page.screenshot({ path: path.join(output, 'doc-review.png'), fullPage: true });

    // Send back: the confirmation shows the note and the files and changes nothing; its Yes retries the run.
    await page.fill('[data-testid="send-back-note"]', 'Say more about x.');
    await page.click('[data-testid="send-back"]');
    assert.equal(await page.locator('[data-testid="confirm-note"]').innerText(), 'Say more about x.');
    assert.ok((await page.locator('[data-testid="confirm-files"]').innerText()).includes(sha256(DOC)));
    assert.ok(await fits(), 'the confirmation fits 390 px');
    await page.screenshot({ path: path.join(output, 'doc-review-send-back.png'), fullPage: true });
    assert.equal((await s.run(runId)).attempt, 1, 'the confirmation changes nothing');
    await Promise.all([page.waitForURL(`${server.url}/runs/${runId}`), page.click('[data-testid="confirm-yes"]')]);
    const resumed = await completed(runId, 2);
    assert.match(resumed.job.brief, /: Say more about x\.$/);
    assert.match((await s.events(runId, 'doc_sent_back'))[0]?.metadata.by, /^panel:/);

    // Publish: the confirmation first, then published with the event.
    await page.goto(`${server.url}/runs/${runId}`);
    await page.click('[data-testid="publish"]');
    await page.waitForSelector('[data-testid="confirm-files"]');
    assert.equal((await briefOf(runId)).status, 'doc_review', 'the confirmation publishes nothing');
    await Promise.all([page.waitForURL(`${server.url}/runs/${runId}`), page.click('[data-testid="confirm-yes"]')]);
    assert.equal((await briefOf(runId)).status, 'published');
    assert.match((await s.events(runId, 'doc_published'))[0]?.metadata.by, /^panel:/);
    assert.equal(await page.locator('[data-testid="brief-status"]').innerText(), 'published');
    assert.equal(await page.locator('[data-testid="publish"]').count(), 0, 'no Publish once published');
  } finally {
    await browser.close();
  }
  assert.equal((await api('publish', {})).status, 409, 'published already');
});
