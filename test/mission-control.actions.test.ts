// Mission control's operator actions over real HTTP, with real workers, Postgres and git:
// cancel, retry and fork from the API; the checkpoint diff; the same 401/404 rules as reads;
// cookie-authenticated writes need the page's CSRF token and the same origin.
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { createMissionControl, type RunningMissionControl } from '../scripts/mission-control/server.ts';
import { csrfTokenFor } from '../scripts/mission-control/routes-actions.ts';
import { createWorkspace } from '../store/runs.ts';
import { createWorkspaceToken } from '../store/tokens.ts';
import { withWorkspace } from '../store/workspace.ts';
import { waitFor, type Child } from './support/child.ts';
import { createScenario, type Scenario, type TranscriptStep } from './support/scenario.ts';

const write = (file: string, content: string, delayMs = 10): TranscriptStep => ({
  toolCalls: [{ toolName: 'write_file', input: { path: file, content } }],
  delayMs,
});
const BIG = `${'a line of a big generated file, repeated to go over the diff cap\n'.repeat(6000)}`;
// Round 3 "thinks" for a minute: a run can be caught alive however slow the machine is.
const STEPS: TranscriptStep[] = [
  write('src/greet.ts', 'export const greet = (n: string) => `hello ${n}`;\n'),
  { toolCalls: [{ toolName: 'write_file', input: { path: 'src/greet.ts', content: 'export const greet = (n: string) => `hi ${n}`;\n' } }, { toolName: 'write_file', input: { path: 'notes/secret.txt', content: 'token sk-live-0123456789abcdef0123456789\n' } }], delayMs: 10 },
  write('big.txt', BIG, 60_000),
  { text: 'Done.' },
];

let s: Scenario;
let worker: Child;
let server: RunningMissionControl;
let token: string;
let otherToken: string;
let quickModel: string;
let bigModel: string;

before(async () => {
  s = await createScenario({ steps: STEPS });
  const dir = path.dirname(s.transcriptPath);
  await writeFile(path.join(dir, 'quick.json'), JSON.stringify({ steps: [write('q.txt', 'q\n'), { text: 'ok' }] }));
  await writeFile(path.join(dir, 'big.json'), JSON.stringify({ steps: [write('big.txt', BIG, 0), { text: 'ok' }] }));
  quickModel = `replay:${path.join(dir, 'quick.json')}`;
  bigModel = `replay:${path.join(dir, 'big.json')}`;
  await withWorkspace(s.t.db.app, 'other', (tx) => createWorkspace(tx));
  token = await createWorkspaceToken(s.t.db.app, s.workspaceId);
  otherToken = await createWorkspaceToken(s.t.db.app, 'other');
  server = await createMissionControl({ db: s.t.db, config: { ...s.config, LOG_LEVEL: 'silent' }, queue: s.queue }).start(0);
  worker = s.spawnWorker();
});
after(async () => {
  await worker?.stop();
  await server?.close();
  await s?.close();
});

const post = (p: string, body: unknown, headers: Record<string, string> = { authorization: `Bearer ${token}` }) =>
  fetch(server.url + p, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body), redirect: 'manual' });
const getJson = (p: string, t = token) => fetch(server.url + p, { headers: { authorization: `Bearer ${t}` } });

async function checkpointsOf(id: string, n: number) {
  await waitFor(async () => (await s.checkpoints(id)).length >= n, { timeoutMs: 60_000, what: `${n} checkpoints of ${id}` }).catch((e: Error) => {
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
  assert.deepEqual(await foreign.json(), await missing.json(), 'another workspace\'s run answers exactly as a missing one');

  const res = await post(`/api/runs/${agentRunId}/cancel`, {});
  assert.equal(res.status, 200);
  const body = await res.json();
  assert.equal(body.immediate, false);
  const run = await s.waitForStatus(agentRunId, 'cancelled', 30_000);
  assert.match(run.cancel_requested_by, /^api:/, 'who asked: the API token');
  assert.equal((await s.checkpoints(agentRunId)).length, 2);
  assert.equal((await post(`/api/runs/${agentRunId}/retry`, {})).status, 409, 'a cancelled run is not retried');
});

test('the diff of a checkpoint: files with +/- counts, the diff text, the round\'s tool calls (redacted); big diffs truncated', async () => {
  const { agentRunId } = await s.dispatch({ model: quickModel });
  await s.waitForStatus(agentRunId, 'completed', 60_000);
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
  assert.deepEqual(diff.toolCalls.map((c: any) => c.tool), ['write_file', 'write_file'], 'the two calls of round 2, not round 1\'s');
  assert.equal(JSON.stringify(diff).includes('sk-live-0123456789abcdef0123456789'), false, 'the secret is redacted');
  assert.equal(diff.truncated, false);
  assert.equal((await getJson(`/api/runs/${source}/checkpoints/9/diff`)).status, 404);
  assert.equal((await getJson(`/api/runs/${source}/checkpoints/2/diff`, otherToken)).status, 404);
  await post(`/api/runs/${source}/cancel`, {});

  const big = (await s.dispatch({ model: bigModel })).agentRunId;
  await s.waitForStatus(big, 'completed', 60_000);
  const cut = await (await getJson(`/api/runs/${big}/checkpoints/1/diff`)).json();
  assert.equal(cut.truncated, true, 'a diff over the cap is marked truncated');
  const file = cut.files.find((f: any) => f.path === 'big.txt');
  assert.equal(file.added, 6000, 'the line counts are whole');
  assert.ok(file.diff.length <= 64 * 1024, 'the text is capped');
});

test('fork and retry from the API, each continued by a real worker', async () => {
  const { agentRunId: source } = await s.dispatch({ model: quickModel });
  await s.waitForStatus(source, 'completed', 60_000);
  for (const bad of [{}, { at: 0 }, { at: '1; drop' }, { at: 1, extra: true }, { at: 1, brief: 7 }]) {
    assert.equal((await post(`/api/runs/${source}/fork`, bad)).status, 400, JSON.stringify(bad));
  }
  assert.equal((await post(`/api/runs/${source}/fork`, { at: 5 })).status, 404);
  const res = await post(`/api/runs/${source}/fork`, { at: 1, model: quickModel, brief: 'Again, differently.' });
  assert.equal(res.status, 200);
  const fork = await res.json();
  assert.match(fork.branch, /^echodo\//);
  const forked = await s.waitForStatus(fork.agentRunId, 'completed', 60_000);
  assert.equal(forked.forked_from_run, source);
  assert.equal(forked.job.brief, 'Again, differently.');

  // Retry: a run whose worker died and that the stall detector gave up on.
  const { agentRunId: failing } = await s.dispatch({ model: quickModel });
  await s.waitForStatus(failing, 'completed', 60_000);
  await s.su`update agent_runs set status = 'failed', failure_reason = 'test: worker lost' where id = ${failing}`;
  const retried = await post(`/api/runs/${failing}/retry`, {});
  assert.equal(retried.status, 200);
  assert.equal((await retried.json()).outcome, 'redispatched');
  const again = await s.waitForStatus(failing, 'completed', 60_000);
  assert.equal(again.attempt, 2);
  assert.equal((await post(`/api/runs/${failing}/retry`, {})).status, 409, 'a completed run is refused');
});

test('cookie-authenticated writes need the CSRF token and the same origin', async () => {
  const { agentRunId } = await s.dispatch({ model: quickModel });
  await s.waitForStatus(agentRunId, 'completed', 60_000);
  const cookie = { cookie: `emc_token=${token}` };
  const origin = { origin: server.url };
  const csrf = csrfTokenFor(token);
  const at = `/api/runs/${agentRunId}/fork`;
  assert.equal((await post(at, { at: 1, model: quickModel }, { ...cookie, ...origin })).status, 403, 'no CSRF token');
  assert.equal((await post(at, { at: 1, model: quickModel }, { ...cookie, ...origin, 'x-csrf-token': 'wrong' })).status, 403);
  assert.equal((await post(at, { at: 1, model: quickModel }, { ...cookie, origin: 'http://evil.example', 'x-csrf-token': csrf })).status, 403, 'foreign origin');
  assert.equal((await post(at, { at: 1, model: quickModel }, { ...cookie, 'x-csrf-token': csrf })).status, 403, 'no origin at all');
  const ok = await post(at, { at: 1, model: quickModel }, { ...cookie, ...origin, 'x-csrf-token': csrf });
  assert.equal(ok.status, 200);
  // The page's form: same token, form-encoded, answered with a redirect to the new run.
  const form = await fetch(`${server.url}/runs/${agentRunId}/actions/fork`, {
    method: 'POST',
    headers: { ...cookie, ...origin, 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ _csrf: csrf, at: '1', model: quickModel }),
    redirect: 'manual',
  });
  assert.equal(form.status, 303);
  assert.match(form.headers.get('location') ?? '', /^\/runs\//);
  const page = await (await fetch(`${server.url}/runs/${agentRunId}`, { headers: cookie })).text();
  assert.ok(page.includes(`value="${csrf}"`), 'the run page carries the CSRF token in its forms');
  assert.ok(page.includes('data-testid="fork-1"'), 'and offers "Fork from here"');
});
