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
import { upsertModelProvider } from '../store/workspace-config.ts';
import { withWorkspace } from '../store/workspace.ts';
import { waitFor, type Child } from './support/child.ts';
import { startChatServer, type ChatServer } from './support/chat-server.ts';
import { git } from './support/git.ts';
import { createScenario, type Scenario } from './support/scenario.ts';

const KEY_VAR = 'ECHODO_E2E_KEY';
const KEY = `sk-e2e-${randomBytes(16).toString('hex')}`;
const NOTE = 'export const note = "written by the remote model";\n';

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
  await withWorkspace(s.t.db.app, s.workspaceId, async (tx) => {
    await upsertModelProvider(tx, { alias: 'local', provider: 'openai-compatible', base_url: server.baseURL, model: 'e2e-model', api_key_env_var: KEY_VAR });
    // `env` allowlisted for this workspace's code harness, so a command can show its environment.
    await tx`insert into harness_providers (workspace_id, alias, needs_worktree, allowed_commands, write_prefixes)
             values (${tx.workspaceId}, 'code', true, ${['env', 'git status']}, null)`;
  });
  // The key is in the worker's environment only (never in this test process's).
  worker = s.spawnWorker({ [KEY_VAR]: KEY, LOG_LEVEL: 'debug' });
  ({ agentRunId } = await s.dispatch({ model: 'local' }));
  await waitFor(async () => {
    const row = await s.run(agentRunId);
    return row.status === 'completed' || row.status === 'failed';
  }, { timeoutMs: 40_000, what: 'the run to finish' });
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
  const history = rows.at(-1)!.tool_history as { tool: string; ok: boolean; result?: { exitCode: number; tail: string } }[];
  const envCall = history.find((h) => h.tool === 'run_command');
  assert.equal(envCall?.ok, true, 'env ran');
  assert.equal(envCall!.result!.exitCode, 0);
  assert.match(envCall!.result!.tail, /^HOME=.*\nLANG=C\.UTF-8$/m, 'the recorded output (its tail) is env output');
  assert.doesNotMatch(envCall!.result!.tail, new RegExp(`${KEY_VAR}|DATABASE_URL|REDIS_URL`));

  // What the model was sent after the command: the tool message carries env's raw output.
  const last = server.requests.at(-1)!.body as { messages: { role: string; content: unknown }[] };
  const toolMessages = last.messages.filter((m) => m.role === 'tool').map((m) => JSON.stringify(m.content));
  const envResult = toolMessages.find((m) => m.includes('PATH=') && m.includes('GIT_TERMINAL_PROMPT=0'));
  assert.ok(envResult, `a tool result with env output was sent: ${toolMessages.join(' | ')}`);
  assert.ok(!envResult.includes(KEY_VAR), 'the key variable is not in the command environment');
  for (const r of server.requests) assert.ok(!JSON.stringify(r.body).includes(KEY), 'no request body holds the key');
});

test('no row of any table holds the key', async () => {
  const tables = await s.su<{ tablename: string }[]>`select tablename from pg_tables where schemaname = 'public' order by tablename`;
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
  assert.ok(!(await git(s.repo, 'log', '--all', '-p', '--notes=*')).includes(KEY.slice(7)), '!(await git(s.repo, \'log\', \'--all\', \'-p\', \'--notes=*\')).includes(KEY.sli');
});

test('a worker without the key fails the run with a reason naming the variable, and sends nothing', async () => {
  const sent = server.requests.length;
  const keyless = s.spawnWorker({ [KEY_VAR]: '' });
  try {
    const { agentRunId: id } = await s.dispatch({ model: 'local' });
    const run = await waitFor(async () => {
      const row = await s.run(id);
      return row.status === 'completed' || row.status === 'failed' ? row : undefined;
    }, { timeoutMs: 30_000, what: 'the keyless run to finish' });
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
