// `npm run dispatch -- --job FILE` as a real process: one JSON line and exit 0 for a valid job
// (the run recorded as queued); exit 2 with each bad field named for an invalid one.
import assert from 'node:assert/strict';
import { mkdtemp, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import type { Sql } from 'postgres';
import { createWorkspace } from '../store/runs.ts';
import { withWorkspace } from '../store/workspace.ts';
import { MAX_BRIEF_BYTES } from '../core/job.ts';
import { spawnNode } from './support/child.ts';
import { createTestDatabase, superuserSql, type TestDatabase } from '../testbed/db.ts';

let t: TestDatabase;
let su: Sql;
let dir: string;

const validJob = () => ({
  workspaceId: 'acme',
  convoyId: 'convoy-cli',
  briefId: 'brief-cli',
  roleId: 'coder',
  harnessAlias: 'code',
  // No repoPath: WORKER_REPO_ROOT (any other must be registered to the workspace: test/grants.test.ts).
  baseRef: 'main',
  brief: 'Add a greeting module and a test for it.',
  model: 'replay:/srv/transcripts/greet.json',
});

let fileCount = 0;
async function jobFile(content: unknown): Promise<string> {
  const file = path.join(dir, `job-${++fileCount}.json`);
  await writeFile(file, typeof content === 'string' ? content : JSON.stringify(content));
  return file;
}

async function dispatch(file: string) {
  const child = spawnNode('scripts/dispatch.ts', ['--job', file], { env: { ...t.env, REDIS_URL: undefined } });
  const exit = await child.exited;
  return { code: exit.code, stdout: child.stdout, stderr: child.stderr.join('\n') };
}

const runCount = async () => (await su`select count(*)::int as n from agent_runs`)[0]!.n as number;

before(async () => {
  t = await createTestDatabase();
  su = superuserSql(t.url);
  await withWorkspace(t.db.app, 'acme', (tx) => createWorkspace(tx));
  dir = await mkdtemp(path.join(os.tmpdir(), 'echodo-dispatch-cli-'));
});

after(async () => {
  await su?.end({ timeout: 2 });
  await t?.drop();
});

test('a valid job prints exactly one JSON line {jobId, agentRunId}, exits 0, and the run is queued', async () => {
  const { code, stdout, stderr } = await dispatch(await jobFile(validJob()));
  assert.equal(code, 0, stderr);
  assert.equal(stdout.length, 1, `one line on stdout: ${JSON.stringify(stdout)}`);
  const printed = JSON.parse(stdout[0]!);
  assert.deepEqual(Object.keys(printed).sort(), ['agentRunId', 'jobId']);
  assert.equal(typeof printed.jobId, 'string');
  const [run] = await su`select * from agent_runs where id = ${printed.agentRunId}`;
  assert.ok(run, 'the run is recorded');
  assert.equal(run.status, 'queued');
  assert.equal(run.job_id, printed.jobId);
  assert.equal(run.workspace_id, 'acme');
  assert.equal(run.job.brief, validJob().brief);
});

test('a job with several bad fields exits 2 and names each of them', async () => {
  const before = await runCount();
  const { workspaceId: _, ...job } = validJob();
  const { code, stdout, stderr } = await dispatch(
    await jobFile({ ...job, resumeFromCheckpoint: 'yes', priority: 'high', repoPath: 'relative/repo' }),
  );
  assert.equal(code, 2, stderr);
  assert.deepEqual(stdout, []);
  assert.match(stderr, /workspaceId/, 'names the missing workspaceId');
  assert.match(stderr, /resumeFromCheckpoint/, 'names the mistyped resumeFromCheckpoint');
  assert.match(stderr, /priority/, 'names the unknown field');
  assert.match(stderr, /repoPath.*absolute/, 'names the relative repoPath');
  assert.equal(await runCount(), before, 'nothing recorded');
});

test('a file that is not JSON exits 2', async () => {
  const { code, stdout, stderr } = await dispatch(await jobFile('{"workspaceId": "acme", '));
  assert.equal(code, 2);
  assert.deepEqual(stdout, []);
  assert.match(stderr, /invalid job file .*job-\d+\.json/);
  assert.match(stderr, /JSON/);
});

test('a brief over 256 KiB exits 2 naming brief', async () => {
  const { code, stderr } = await dispatch(
    await jobFile({ ...validJob(), briefId: 'brief-big', brief: 'x'.repeat(MAX_BRIEF_BYTES + 1) }),
  );
  assert.equal(MAX_BRIEF_BYTES, 256 * 1024);
  assert.equal(code, 2);
  assert.match(stderr, /brief: brief is larger than 262144 bytes/);
  // Exactly 256 KiB is still fine.
  const ok = await dispatch(
    await jobFile({ ...validJob(), briefId: 'brief-limit', brief: 'x'.repeat(MAX_BRIEF_BYTES) }),
  );
  assert.equal(ok.code, 0, ok.stderr);
});

test('an unknown workspace exits 2 with a message naming it', async () => {
  const before = await runCount();
  const { code, stdout, stderr } = await dispatch(await jobFile({ ...validJob(), workspaceId: 'nowhere' }));
  assert.equal(code, 2);
  assert.deepEqual(stdout, []);
  assert.match(stderr, /workspace "nowhere" does not exist/);
  assert.equal(await runCount(), before);
});

test('usage errors exit 2: no --job, a missing file', async () => {
  const noJob = spawnNode('scripts/dispatch.ts', [], { env: t.env });
  assert.equal((await noJob.exited).code, 2);
  assert.match(noJob.stderr.join('\n'), /--job/);
  const missing = await dispatch(path.join(dir, 'no-such-job.json'));
  assert.equal(missing.code, 2);
  assert.match(missing.stderr, /no-such-job\.json/);
});

test('a NUL or a lone surrogate in any field exits 2 naming the field; nothing is recorded', async () => {
  const before = await runCount();
  for (const [field, value] of [
    ['brief', 'a\u0000b'],
    ['model', 'replay:/x\ud800'],
    ['baseRef', 'ma\u0000in'],
    ['repoPath', '/srv/\udc00repo'],
  ] as const) {
    const { code, stdout, stderr } = await dispatch(
      await jobFile({ ...validJob(), briefId: `brief-${field}`, [field]: value }),
    );
    assert.equal(code, 2, `${field}: ${stderr}`);
    assert.deepEqual(stdout, []);
    assert.match(stderr, new RegExp(`${field}: ${field} holds a NUL character or a lone surrogate`));
  }
  assert.equal(await runCount(), before);
});

test('resume_from_checkpoint is an alias of resumeFromCheckpoint; both given and different exits 2', async () => {
  const ok = await dispatch(await jobFile({ ...validJob(), briefId: 'brief-alias', resume_from_checkpoint: true }));
  assert.equal(ok.code, 0, ok.stderr);
  const [run] = await su`select job from agent_runs where id = ${JSON.parse(ok.stdout[0]!).agentRunId}`;
  assert.equal(run!.job.resumeFromCheckpoint, true);
  assert.equal('resume_from_checkpoint' in run!.job, false, 'stored under its contract name');

  const both = await dispatch(
    await jobFile({
      ...validJob(),
      briefId: 'brief-alias-2',
      resume_from_checkpoint: true,
      resumeFromCheckpoint: false,
    }),
  );
  assert.equal(both.code, 2);
  assert.match(both.stderr, /resume_from_checkpoint: differs from resumeFromCheckpoint/);
});

test('a job naming an existing run of another workspace is answered as an unknown id (a new run), never as a refusal', async () => {
  await withWorkspace(t.db.app, 'elsewhere', (tx) => createWorkspace(tx));
  const first = await dispatch(await jobFile({ ...validJob(), briefId: 'brief-tenant', agentRunId: 'shared-run-id' }));
  assert.equal(first.code, 0, first.stderr);
  const other = await dispatch(
    await jobFile({ ...validJob(), workspaceId: 'elsewhere', briefId: 'brief-tenant', agentRunId: 'shared-run-id' }),
  );
  assert.equal(other.code, 0, other.stderr);
  assert.equal(JSON.parse(other.stdout[0]!).agentRunId, 'shared-run-id');
  const rows =
    await su`select workspace_id, status, attempt from agent_runs where id = 'shared-run-id' order by workspace_id`;
  assert.deepEqual(
    rows.map((r) => [r.workspace_id, r.status, r.attempt]),
    [
      ['acme', 'queued', 1],
      ['elsewhere', 'queued', 1],
    ],
  );
  // And in its own workspace the same id is a re-dispatch of a queued run: served, exit 0, the same line.
  const again = await dispatch(await jobFile({ ...validJob(), briefId: 'brief-tenant', agentRunId: 'shared-run-id' }));
  assert.equal(again.code, 0, again.stderr);
  assert.deepEqual(JSON.parse(again.stdout[0]!), JSON.parse(first.stdout[0]!));
});
