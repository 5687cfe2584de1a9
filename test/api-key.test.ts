// An API key for an openai-compatible model reaches the model server and nothing else: not a
// row of any table, not a log line, not a command's environment (nor the tool result sent back
// to the model), not a git note or commit. The model is the loopback chat server; everything
// else is real (worker process, Postgres, git).
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { chmod, mkdtemp, readFile, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { upsertModelProvider } from '../store/settings-lookup.ts';
import { grantKey } from './support/grants.ts';
import { withWorkspace } from '../store/workspace.ts';
import { ProviderKeyVarRefusedError } from '../core/key-vars.ts';
import { spawnNode, waitFor, type Child } from './support/child.ts';
import { startChatServer, type ChatServer } from './support/chat-server.ts';
import { git } from './support/git.ts';
import { createScenario, type Scenario } from './support/scenario.ts';

const KEY_VAR = 'ECHODO_E2E_API_KEY';
const KEY = `sk-e2e-${randomBytes(16).toString('hex')}`;
const NOTE = 'export const note = "written by the remote model";\n';
// Nothing here is about stalls: a lease long enough for a loaded 2-core machine.
const CALM_LEASE = { WORKER_LEASE_MS: '15000', WORKER_HEARTBEAT_MS: '500' };

let s: Scenario;
let server: ChatServer;
let worker: Child;
let agentRunId: string;
let hookEnvFile: string;
let hookEnv = '';

before(async () => {
  server = await startChatServer([
    { toolCalls: [{ name: 'write_file', arguments: { path: 'src/note.ts', content: NOTE } }] },
    { toolCalls: [{ name: 'run_command', arguments: { command: 'env' } }] },
    { text: 'Wrote the note and looked at the environment.' },
  ]);
  s = await createScenario({ steps: [{ text: 'unused: this test uses the chat server' }] });
  // A hook of the repo that `git worktree add` runs: it records the environment it was given.
  hookEnvFile = path.join(await mkdtemp(path.join(os.tmpdir(), 'echodo-apikey-hook-')), 'env.txt');
  const hook = path.join(s.repo, '.git', 'hooks', 'post-checkout');
  await writeFile(hook, `#!/bin/sh\nenv > '${hookEnvFile}'\n`);
  await chmod(hook, 0o755);
  await grantKey(s.su, s.workspaceId, KEY_VAR);
  await withWorkspace(s.t.db.app, s.workspaceId, async (tx) => {
    await upsertModelProvider(tx, {
      alias: 'local',
      provider: 'openai-compatible',
      base_url: server.baseURL,
      model: 'e2e-model',
      api_key_env_var: KEY_VAR,
    });
    // `env` allowlisted for this workspace's code harness, so a command can show its environment.
    await tx`insert into harness_providers (workspace_id, alias, needs_worktree, allowed_commands, write_prefixes)
             values (${tx.workspaceId}, 'code', true, ${['env', 'git status']}, null)`;
  });
  // The key is in the worker's environment only (never in this test process's).
  worker = s.spawnWorker({ ...CALM_LEASE, [KEY_VAR]: KEY, LOG_LEVEL: 'debug' });
  ({ agentRunId } = await s.dispatch({ model: 'local' }));
  await waitFor(
    async () => {
      const row = await s.run(agentRunId);
      return row.status === 'completed' || row.status === 'failed';
    },
    { timeoutMs: 120_000, what: 'the run to finish' },
  ).catch((err) => {
    throw new Error(`${(err as Error).message}\n${worker.output()}`);
  });
  await worker.stop('SIGTERM', 5000);
  hookEnv = await readFile(hookEnvFile, 'utf8').catch(() => '');
});

after(async () => {
  await worker?.stop('SIGKILL', 100);
  await server?.close();
  await s?.close();
});

test('the run with the openai-compatible model completes, the key sent as a bearer token', async () => {
  const run = await s.run(agentRunId);
  assert.equal(run.status, 'completed', `run failed: ${run.failure_reason}\n${worker.output()}`);
  assert.equal(server.remaining(), 0, 'all three scripted responses were used');
  const calls = server.requests.filter((r) => r.url === '/v1/chat/completions');
  assert.equal(calls.length, 3);
  for (const r of calls) assert.equal(r.headers.authorization, `Bearer ${KEY}`);
  assert.equal(await git(s.repo, 'show', `${run.branch}:src/note.ts`), NOTE.replace(/\n$/, ''));
});

test('the command environment holds no key, and neither does the tool result sent back to the model', async () => {
  const rows = await s.checkpoints(agentRunId);
  const history = rows.flatMap((r) => r.tool_history) as {
    tool: string;
    ok: boolean;
    result?: { exitCode: number; tail: string };
  }[];
  const envCall = history.find((h) => h.tool === 'run_command');
  assert.equal(envCall?.ok, true, 'env ran');
  assert.equal(envCall!.result!.exitCode, 0);
  assert.match(envCall!.result!.tail, /^(HOME|PATH|LANG)=/m, 'the recorded output (its tail) is env output');
  assert.doesNotMatch(envCall!.result!.tail, new RegExp(`${KEY_VAR}|DATABASE_URL|REDIS_URL`));

  // What the model was sent after the command: the tool message carries env's raw output.
  const last = server.requests.at(-1)!.body as { messages: { role: string; content: unknown }[] };
  const toolMessages = last.messages.filter((m) => m.role === 'tool').map((m) => JSON.stringify(m.content));
  const envResult = toolMessages.find((m) => m.includes('PATH=') && m.includes('HOME='));
  assert.ok(envResult, `a tool result with env output was sent: ${toolMessages.join(' | ')}`);
  assert.ok(!envResult.includes(KEY_VAR), 'the key variable is not in the command environment');
  for (const r of server.requests) assert.ok(!JSON.stringify(r.body).includes(KEY), 'no request body holds the key');
});

test('no row of any table holds the key', async () => {
  const tables = await s.su<
    { tablename: string }[]
  >`select tablename from pg_tables where schemaname = 'public' order by tablename`;
  assert.ok(tables.length >= 10, `tables: ${tables.map((t) => t.tablename).join(', ')}`);
  let dump = '';
  for (const { tablename } of tables) {
    const rows = await s.su.unsafe(`select row_to_json(t)::text as j from "${tablename}" t`);
    dump += rows.map((r) => r.j).join('\n');
  }
  // The dump is real: it has the provider row (the variable's name) and the run's checkpoints.
  assert.ok(dump.includes(KEY_VAR) && dump.includes(agentRunId), 'dump.includes(KEY_VAR) && dump.includes(agentRunId)');
  assert.ok(!dump.includes(KEY), 'the key is in a table row');
  assert.ok(!dump.includes(KEY.slice(7)), 'part of the key is in a table row');
});

test('no line of the worker output holds the key', () => {
  assert.ok(worker.lines.length > 5, 'the worker logged (at debug level)');
  assert.ok(worker.output().includes('"tool round done"'), 'worker.output().includes(\'"tool round done"\')');
  assert.ok(!worker.output().includes(KEY.slice(7)), 'the key is in the worker output');
});

test('no git note or commit holds the key', async () => {
  const ref = s.config.WORKER_NOTES_REF;
  const listed = (await git(s.repo, 'notes', `--ref=${ref}`, 'list')).split('\n').filter(Boolean);
  assert.equal(listed.length, (await s.checkpoints(agentRunId)).length, 'one note per checkpoint');
  for (const line of listed) {
    const [noteBlob, commit] = line.split(' ');
    const note = await git(s.repo, 'notes', `--ref=${ref}`, 'show', commit!);
    assert.equal(note, await git(s.repo, 'cat-file', '-p', noteBlob!));
    assert.ok(!note.includes(KEY.slice(7)), `note on ${commit} holds the key`);
  }
  assert.ok(
    !(await git(s.repo, 'log', '--all', '-p', '--notes=*')).includes(KEY.slice(7)),
    "!(await git(s.repo, 'log', '--all', '-p', '--notes=*')).includes(KEY.sli",
  );
});

test('a worker without the key fails the run with a reason naming the variable, and sends nothing', async () => {
  const sent = server.requests.length;
  const keyless = s.spawnWorker({ ...CALM_LEASE, [KEY_VAR]: '' });
  try {
    const { agentRunId: id } = await s.dispatch({ model: 'local' });
    const run = await waitFor(
      async () => {
        const row = await s.run(id);
        return row.status === 'completed' || row.status === 'failed' ? row : undefined;
      },
      { timeoutMs: 60_000, what: 'the keyless run to finish' },
    );
    assert.equal(run.status, 'failed');
    assert.match(run.failure_reason, new RegExp(`${KEY_VAR} is not set`));
    assert.equal(server.requests.length, sent, 'no request went out without the key');
  } finally {
    await keyless.stop('SIGTERM', 5000);
  }
});

test("the repo's hooks do not run while the worker makes its worktree, so they cannot see the key", async () => {
  const env = hookEnv;
  assert.equal(env, '', 'the post-checkout hook did not run');
  assert.ok(!env.includes(KEY.slice(7)), 'the hook was given the API key');
  assert.ok(!/^DATABASE_URL=/m.test(env), 'the hook was given the database URL (with its password)');
});

// Reproduction 7: a model_providers row naming DATABASE_URL, with base_url pointing at a
// listener, delivered the database URL as a bearer token. Such a row is refused when written
// (store, CLI) and, if one exists anyway (written before the rule, or by hand), when it is used.
test(
  'a row naming DATABASE_URL fails the run with a clear reason, and the listener gets nothing',
  { timeout: 90_000 },
  async () => {
    const listener = await startChatServer([{ text: 'never served' }]);
    const password = decodeURIComponent(new URL(s.env.DATABASE_URL!).password);
    const w = s.spawnWorker({ ...CALM_LEASE, [KEY_VAR]: KEY });
    try {
      await s.su`insert into model_providers (workspace_id, alias, provider, base_url, model, api_key_env_var)
               values (${s.workspaceId}, 'leaky', 'openai-compatible', ${listener.baseURL}, 'm', 'DATABASE_URL')`;
      const { agentRunId: id } = await s.dispatch({ model: 'leaky' });
      const run = await waitFor(
        async () => {
          const row = await s.run(id);
          return row.status === 'completed' || row.status === 'failed' ? row : undefined;
        },
        { timeoutMs: 60_000, what: 'the run naming DATABASE_URL to finish' },
      );
      assert.equal(run.status, 'failed');
      assert.match(
        run.failure_reason,
        /api_key_env_var "DATABASE_URL" is refused: .*WORKER_PROVIDER_KEY_VARS \(\*_API_KEY\)/,
        run.failure_reason,
      );
      assert.equal(run.worktree_path, null, 'refused before any worktree was made');
      assert.equal(listener.requests.length, 0, 'nothing was sent to the listener');
      assert.ok(!JSON.stringify(await s.events(id)).includes(password), 'no event holds the database password');
      assert.ok(!w.output().includes(password), 'no log line holds the database password');
    } finally {
      await w.stop('SIGTERM', 5000);
      await listener.close();
    }
  },
);

test('writing a row that names a variable outside WORKER_PROVIDER_KEY_VARS is refused, naming it and the globs', async () => {
  await assert.rejects(
    withWorkspace(s.t.db.app, s.workspaceId, (tx) =>
      upsertModelProvider(
        tx,
        {
          alias: 'bad',
          provider: 'openai-compatible',
          base_url: 'http://127.0.0.1:9/v1',
          model: 'm',
          api_key_env_var: 'DATABASE_URL',
        },
        ['*_API_KEY'],
      ),
    ),
    (err: unknown) =>
      err instanceof ProviderKeyVarRefusedError && /"DATABASE_URL" is refused.*\(\*_API_KEY\)/.test(err.message),
  );
  assert.equal((await s.su`select 1 from model_providers where alias = 'bad'`).length, 0, 'no row was written');

  const cli = (keyEnv: string, env: Record<string, string> = {}) =>
    spawnNode(
      'scripts/workspace.ts',
      [
        'add-model',
        s.workspaceId,
        '--alias',
        `cli-${keyEnv.toLowerCase()}`,
        '--base-url',
        'http://127.0.0.1:9/v1',
        '--model',
        'm',
        '--key-env',
        keyEnv,
      ],
      { env: { ...s.env, ...env } },
    );
  const refused = cli('DATABASE_URL');
  assert.equal((await refused.exited).code, 2, refused.output());
  assert.match(
    refused.output(),
    /api_key_env_var "DATABASE_URL" is refused: a model provider may only name a variable matching WORKER_PROVIDER_KEY_VARS \(\*_API_KEY\)/,
  );
  await grantKey(s.su, s.workspaceId, 'LLM_ACCESS');
  const custom = cli('LLM_ACCESS', { WORKER_PROVIDER_KEY_VARS: '*_API_KEY,LLM_*' });
  assert.equal((await custom.exited).code, 0, custom.output());
  const rows = await s.su<
    { alias: string }[]
  >`select alias from model_providers where alias like 'cli-%' order by alias`;
  assert.deepEqual(
    rows.map((r) => r.alias),
    ['cli-llm_access'],
  );
});
