// Operator grants, end to end with real processes: a key goes only to a workspace it is granted
// to, and only to the granted hosts; a repository only to the workspace(s) it is registered to;
// a replay transcript only from inside WORKER_REPLAY_DIR, and no error ever quotes a file.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { mkdir, mkdtemp, realpath, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { createMissionControl } from '../mission-control/server.ts';
import { registeredRepoPaths } from '../store/grants.ts';
import { createWorkspace } from '../store/runs.ts';
import { createWorkspaceToken } from '../store/tokens.ts';
import { createLogger } from '../worker/log.ts';
import { withWorkspace } from '../store/workspace.ts';
import { resolveModel } from '../worker/models/resolve.ts';
import { spawnNode, waitFor, type Child } from './support/child.ts';
import { startChatServer, type ChatServer } from './support/chat-server.ts';
import { makeRepo } from './support/git.ts';
import { createScenario, type Scenario } from './support/scenario.ts';

const KEY_VAR = 'GRANTS_TEST_API_KEY';
const KEY = 'sk-grants-test-8f14e45fceea167a5a36dedd4bea2543';
const OTHER = 'other';
const CALM = { WORKER_LEASE_MS: '6000', WORKER_HEARTBEAT_MS: '300' };
const LONG = { timeout: 120_000 };
// Content and keys of files a job must never get to see quoted back.
const MARKER_KEY = 'marker_field_5f3a9c';
const MARKER_VALUE = 'marker-content-b71e04';

let s: Scenario;
let worker: Child;
let replayDir: string;
let outsideDir: string;

before(async () => {
  s = await createScenario({ steps: [{ text: 'unused' }] });
  await withWorkspace(s.t.db.app, OTHER, (tx) => createWorkspace(tx));
  replayDir = await realpath(await mkdtemp(path.join(os.tmpdir(), 'echodo-grants-replay-')));
  outsideDir = await realpath(await mkdtemp(path.join(os.tmpdir(), 'echodo-grants-outside-')));
  await writeFile(path.join(replayDir, 'done.json'), JSON.stringify({ steps: [{ text: 'done' }] }));
  worker = s.spawnWorker({ ...CALM, [KEY_VAR]: KEY, WORKER_REPLAY_DIR: replayDir });
});

after(async () => {
  await worker?.stop('SIGKILL', 100);
  await s?.close();
});

/** The replay transcript of one answer, inside WORKER_REPLAY_DIR. */
const doneModel = () => `replay:${path.join(replayDir, 'done.json')}`;

async function cli(script: string, args: string[], env: Record<string, string | undefined> = {}) {
  const child = spawnNode(script, args, { env: { ...s.env, REDIS_URL: undefined, ...env } });
  const { code } = await child.exited;
  return { code, out: child.output() };
}
const workspace = (...args: string[]) => cli('scripts/workspace.ts', args);

async function finished(agentRunId: string): Promise<Record<string, any>> {
  return waitFor(
    async () => {
      const row = await s.run(agentRunId);
      return row.status === 'completed' || row.status === 'failed' ? row : undefined;
    },
    { timeoutMs: 60_000, what: `run ${agentRunId} to finish` },
  ).catch((err) => {
    throw new Error(`${(err as Error).message}\n${worker.output().slice(-3000)}`);
  });
}

/** Everything a run left where someone could read it: its row, its events, the worker's log. */
async function traces(agentRunId: string): Promise<string> {
  return JSON.stringify([await s.run(agentRunId), await s.events(agentRunId)]) + worker.output();
}

describe('key grants', () => {
  let listener: ChatServer;
  before(async () => {
    listener = await startChatServer([{ text: 'done' }]);
  });
  after(() => listener?.close());

  const addModel = (alias: string) =>
    workspace(
      'model',
      'add',
      '--workspace',
      s.workspaceId,
      '--alias',
      alias,
      '--base-url',
      listener.baseURL,
      '--model',
      'm',
      '--key-env',
      KEY_VAR,
    );
  const handWrittenRow = (alias: string) => s.su`
    insert into model_providers (workspace_id, alias, provider, base_url, model, api_key_env_var)
    values (${s.workspaceId}, ${alias}, 'openai-compatible', ${listener.baseURL}, 'm', ${KEY_VAR})`;

  test('an ungranted key: refused when written (exit 2, naming it) and, written by hand, when used', LONG, async () => {
    const refused = await addModel('ungranted');
    assert.equal(refused.code, 2, refused.out);
    assert.match(refused.out, new RegExp(`${KEY_VAR} is not granted to workspace ${s.workspaceId}`));
    assert.equal((await s.su`select 1 from model_providers where alias = 'ungranted'`).length, 0, 'no row written');

    await handWrittenRow('by-hand');
    const { agentRunId } = await s.dispatch({ model: 'by-hand' });
    const run = await finished(agentRunId);
    assert.equal(run.status, 'failed');
    assert.match(run.failure_reason, new RegExp(`${KEY_VAR} is not granted`));
    assert.equal(run.worktree_path, null, 'refused before any worktree was made');
    assert.equal(listener.requests.length, 0, 'the listener received nothing');
    assert.ok(!(await traces(agentRunId)).includes(KEY), 'the key is nowhere');
  });

  test('granted for another host: refused when written, not sent when used; for its host: sent', LONG, async () => {
    const other = await workspace('key', 'grant', '--workspace', s.workspaceId, KEY_VAR, '--host', 'api.example.com');
    assert.equal(other.code, 0, other.out);
    const refused = await addModel('wrong-host');
    assert.equal(refused.code, 2, refused.out);
    const only =
      `${KEY_VAR} is granted to workspace ${s.workspaceId} only for api.example.com, ` + 'not for host 127\\.0\\.0\\.1';
    assert.match(refused.out, new RegExp(only));

    await handWrittenRow('wrong-host-by-hand');
    const { agentRunId: wrong } = await s.dispatch({ model: 'wrong-host-by-hand' });
    const failed = await finished(wrong);
    assert.equal(failed.status, 'failed');
    assert.match(failed.failure_reason, new RegExp(`${KEY_VAR} is granted .* only for api\\.example\\.com`));
    assert.equal(listener.requests.length, 0, 'the key was not sent to an ungranted host');

    // The positional workspace is kept as an alias of --workspace.
    const twoHosts = ['--host', '127.0.0.1', '--host', 'API.example.com'];
    const right = await workspace('key', 'grant', s.workspaceId, KEY_VAR, ...twoHosts);
    assert.equal(right.code, 0, right.out);
    const listed = await workspace('key', 'list');
    const hosts = '"hosts":\\["127.0.0.1","api.example.com"\\]';
    assert.match(listed.out, new RegExp(`"workspace":"${s.workspaceId}","variable":"${KEY_VAR}",${hosts}`));
    const added = await addModel('granted');
    assert.equal(added.code, 0, added.out);
    const { agentRunId } = await s.dispatch({ model: 'granted' });
    const run = await finished(agentRunId);
    assert.equal(run.status, 'completed', run.failure_reason);
    assert.equal(listener.requests.length, 1);
    assert.equal(listener.requests[0]!.headers.authorization, `Bearer ${KEY}`);
  });

  test("mission control's Settings refuses a model row naming an ungranted key, and cannot grant one", async () => {
    const logger = createLogger({ level: 'silent' });
    const server = await createMissionControl({ db: s.t.db, config: s.config, logger }).start(0);
    try {
      const token = await createWorkspaceToken(s.t.db.app, OTHER);
      const form = new URLSearchParams({ alias: 'panel', baseUrl: listener.baseURL, model: 'm', keyEnv: KEY_VAR });
      const res = await fetch(`${server.url}/settings/models`, {
        method: 'POST',
        body: form,
        redirect: 'manual',
        headers: { authorization: `Bearer ${token}` },
      });
      assert.equal(res.status, 400);
      assert.match(await res.text(), new RegExp(`${KEY_VAR} is not granted to workspace ${OTHER}`));
      const rows = await s.su`select 1 from model_providers where workspace_id = ${OTHER}`;
      assert.equal(rows.length, 0, 'no row written');
      // No route of the panel writes grants.
      const grant = await fetch(`${server.url}/settings/key_grants`, {
        method: 'POST',
        body: new URLSearchParams({ env_var: KEY_VAR }),
        redirect: 'manual',
        headers: { authorization: `Bearer ${token}` },
      });
      assert.notEqual(grant.status, 303);
      assert.equal((await s.su`select 1 from key_grants where workspace_id = ${OTHER}`).length, 0, 'no grant written');
    } finally {
      await server.close();
    }
  });

  test("grants are the operator's: the app login cannot write them; revoke; bad arguments exit 2", async () => {
    // The app login (every worker, mission control, any workspace token) may only read them.
    await assert.rejects(
      withWorkspace(
        s.t.db.app,
        s.workspaceId,
        (tx) => tx`
        insert into key_grants (workspace_id, env_var) values (${s.workspaceId}, 'X_API_KEY')`,
      ),
      (err: { code?: string }) => err.code === '42501',
    );
    await assert.rejects(
      withWorkspace(s.t.db.app, s.workspaceId, (tx) => tx`update key_grants set hosts = '{}'`),
      (err: { code?: string }) => err.code === '42501',
    );
    const otherGrant = await workspace('key', 'grant', '--workspace', OTHER, 'OTHER_API_KEY');
    assert.equal(otherGrant.code, 0, otherGrant.out);
    const visible = await withWorkspace(s.t.db.app, s.workspaceId, (tx) => tx`select env_var from key_grants`);
    assert.ok(!visible.some((r) => r.env_var === 'OTHER_API_KEY'), "another workspace's grants are invisible");

    assert.equal((await workspace('key', 'revoke', '--workspace', OTHER, 'OTHER_API_KEY')).code, 0);
    const again = await workspace('key', 'revoke', '--workspace', OTHER, 'OTHER_API_KEY');
    assert.equal(again.code, 2);
    assert.match(again.out, /OTHER_API_KEY is not granted to workspace other/);
    for (const [args, reason] of [
      [['key', 'grant', '--workspace', OTHER, 'DATABASE_URL'], /DATABASE_URL does not match WORKER_PROVIDER_KEY_VARS/],
      [['key', 'grant', '--workspace', OTHER, 'A_API_KEY', '--host', 'not a host'], /"not a host" is not a host name/],
      [['key', 'grant', '--workspace', OTHER], /key grant needs VAR/],
      [['key', 'grant', '--workspace', 'no such', 'A_API_KEY'], /workspace "no such" must be 1-64 letters/],
      [['key', 'grant', '--workspace', OTHER, 'A_API_KEY', '--bogus'], /Unknown option '--bogus'/],
      [['route', 'add', '--workspace', OTHER, '--role', 'r', '--harness', 'nosuch'], /harness nosuch is neither built/],
      [['create', '--workspace', 'bad name!'], /workspace "bad name!" must be/],
    ] as const) {
      const r = await workspace(...args);
      assert.equal(r.code, 2, `${args.join(' ')}: ${r.out}`);
      assert.match(r.out, reason);
      assert.doesNotMatch(r.out, /\n\s+at /, 'no stack trace');
    }
    const help = await cli('scripts/workspace.ts', ['--help'], { DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none' });
    assert.equal(help.code, 0, help.out);
    for (const word of ['key grant', 'repo add', '--shared', '--host', 'exit codes', 'WORKER_PROVIDER_KEY_VARS']) {
      assert.ok(help.out.includes(word), word);
    }
  });
});

describe('repository grants', () => {
  let theirs: string;
  const jobFile = async (repoPath: string) => {
    const file = path.join(await mkdtemp(path.join(os.tmpdir(), 'echodo-grants-job-')), 'job.json');
    await writeFile(
      file,
      JSON.stringify({
        workspaceId: s.workspaceId,
        convoyId: 'c',
        roleId: 'coder',
        briefId: `b-${Math.random().toString(36).slice(2, 8)}`,
        harnessAlias: 'code',
        repoPath,
        baseRef: 'main',
        brief: 'x',
        model: doneModel(),
      }),
    );
    return file;
  };
  before(async () => {
    theirs = await realpath(await makeRepo({ 'README.md': "# another tenant's repository\n" }));
  });

  test("another workspace's repository: refused at dispatch, claim, registration; shared: allowed", LONG, async () => {
    const registered = await workspace('repo', 'add', '--workspace', OTHER, theirs);
    assert.equal(registered.code, 0, registered.out);
    // The worker's start-up reads every registered path (names only) to keep ECHODO_HOME out of them.
    assert.deepEqual(await registeredRepoPaths(s.t.db.app), [theirs]);
    const home = await workspace('repo', 'add', '--workspace', OTHER, path.dirname(s.env.ECHODO_HOME!));
    assert.equal(home.code, 2, home.out);
    assert.match(home.out, /holds ECHODO_HOME/);

    const dispatched = await cli('scripts/dispatch.ts', ['--job', await jobFile(theirs)]);
    assert.equal(dispatched.code, 2, dispatched.out);
    const unregistered = `repoPath: ${theirs} is not a repository registered to workspace ${s.workspaceId}`;
    assert.match(dispatched.out, new RegExp(unregistered));
    // A symlink to it is the same repository.
    const link = path.join(await mkdtemp(path.join(os.tmpdir(), 'echodo-grants-link-')), 'repo');
    await symlink(theirs, link);
    assert.equal((await cli('scripts/dispatch.ts', ['--job', await jobFile(link)])).code, 2);

    // Enqueued past dispatch: the claim refuses it, before any worktree.
    const { agentRunId } = await s.dispatch({ repoPath: theirs, model: doneModel() });
    const run = await finished(agentRunId);
    assert.equal(run.status, 'failed');
    assert.match(run.failure_reason, /is not a repository registered to workspace acme/);
    assert.equal(run.worktree_path, null);
    const [failedEvent] = await s.events(agentRunId, 'run_failed');
    assert.match(failedEvent!.metadata.reason, /not a repository registered/);

    // Registering it to a second workspace is refused while the first holds it unshared.
    const second = await workspace('repo', 'add', '--workspace', s.workspaceId, theirs, '--shared');
    assert.equal(second.code, 2, second.out);
    assert.match(second.out, /is registered to workspace other, not shared/);
    // A registration written by hand beside an unshared one is still refused at the claim.
    await s.su`insert into repo_grants (workspace_id, path) values (${s.workspaceId}, ${theirs})`;
    const { agentRunId: forged } = await s.dispatch({ repoPath: theirs, model: doneModel() });
    assert.match((await finished(forged)).failure_reason, /registered to another workspace and not shared with acme/);
    await s.su`delete from repo_grants where workspace_id = ${s.workspaceId}`;

    // Shared by both: allowed.
    assert.equal((await workspace('repo', 'add', OTHER, theirs, '--shared')).code, 0);
    assert.equal((await workspace('repo', 'add', '--workspace', s.workspaceId, theirs, '--shared')).code, 0);
    const listed = await workspace('repo', 'list');
    assert.match(listed.out, new RegExp(`"workspace":"acme","path":"${theirs}","shared":true`));
    const ok = await cli('scripts/dispatch.ts', ['--job', await jobFile(theirs)]);
    assert.equal(ok.code, 0, ok.out);
    const done = await finished(JSON.parse(ok.out.trim().split('\n').at(-1)!).agentRunId);
    assert.equal(done.status, 'completed', done.failure_reason);

    assert.equal((await workspace('repo', 'rm', '--workspace', s.workspaceId, theirs)).code, 0);
    assert.equal((await workspace('repo', 'rm', '--workspace', s.workspaceId, theirs)).code, 2);
    assert.equal((await workspace('repo', 'add', '--workspace', s.workspaceId, '/no/such/folder')).code, 2);
  });
});

describe('replay only from WORKER_REPLAY_DIR', () => {
  test('unset: no replay model at all', async () => {
    await assert.rejects(
      resolveModel({ model: doneModel(), lookupProvider: async () => undefined, startAt: 0 }),
      /WORKER_REPLAY_DIR is not set/,
    );
  });

  test('a path outside it is refused without being opened (a FIFO whose writer waits for a reader)', async () => {
    const fifo = path.join(outsideDir, 'pipe.json');
    execFileSync('mkfifo', [fifo]);
    // The writer's open returns only once something opens the FIFO for reading.
    const writer = spawn('sh', ['-c', `printf '{"${MARKER_KEY}":1}' > '${fifo}'`], { stdio: 'ignore' });
    let opened = false;
    writer.on('exit', () => (opened = true));
    try {
      for (const model of [`replay:${fifo}`, `replay:${replayDir}/../${path.basename(outsideDir)}/pipe.json`]) {
        await assert.rejects(
          resolveModel({ model, lookupProvider: async () => undefined, startAt: 0, replayDir }),
          /is outside WORKER_REPLAY_DIR/,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, 300));
      assert.equal(opened, false, 'the FIFO was opened');
    } finally {
      writer.kill('SIGKILL');
    }
  });

  test('outside, through a symlink, or not a transcript: the run fails quoting nothing of the file', LONG, async () => {
    const secretJson = JSON.stringify({ [MARKER_KEY]: MARKER_VALUE, nested: { [`${MARKER_KEY}_2`]: [MARKER_VALUE] } });
    const outside = path.join(outsideDir, 'secret.json');
    await writeFile(outside, secretJson);
    const linked = path.join(replayDir, 'link.json');
    await symlink(outside, linked);
    const inside = path.join(replayDir, 'keys.json');
    await writeFile(inside, secretJson);
    const broken = path.join(replayDir, 'broken.json');
    await writeFile(broken, `{"steps": [ ${MARKER_VALUE} `);
    const badEnd = path.join(replayDir, 'bad-end.json');
    await writeFile(badEnd, `{"${MARKER_KEY}": 1,\n  }`);
    const inDirFolder = path.join(replayDir, 'a-folder');
    await mkdir(inDirFolder);

    const cases = [
      [outside, /is outside WORKER_REPLAY_DIR/],
      [linked, /is outside WORKER_REPLAY_DIR/],
      [inside, /is not a valid replay transcript: steps: expected array; \(root\): 2 unexpected field\(s\)/],
      [broken, /is not a valid replay transcript: it is not valid JSON \(an unexpected character\)/],
      [badEnd, /is not a valid replay transcript: it is not valid JSON \(at line 2, column 3\)/],
      [inDirFolder, /is a directory/],
    ] as const;
    const runs = await Promise.all(cases.map(([file]) => s.dispatch({ model: `replay:${file}` })));
    for (const [i, [, reason]] of cases.entries()) {
      const run = await finished(runs[i]!.agentRunId);
      assert.equal(run.status, 'failed');
      assert.match(run.failure_reason, reason);
      const seen = await traces(run.id);
      for (const word of [MARKER_KEY, MARKER_VALUE, 'nested']) {
        assert.ok(!seen.includes(word), `${word} appears for ${cases[i]![0]}`);
      }
    }
  });
});
