// Secrets audit: distinct secrets planted in every place they could come from (the worker's
// environment, a provider row's key variable, a repo file the agent reads, command output, the
// brief itself); then every table, every note, every log line and every event is scanned.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, test } from 'node:test';
import { upsertModelProvider } from '../store/workspace-config.ts';
import { withWorkspace } from '../store/workspace.ts';
import type { Child } from './support/child.ts';
import { git } from './support/git.ts';
import { createScenario, type Scenario } from './support/scenario.ts';

const rand = (n: number) => randomBytes(n).toString('hex').slice(0, n);
const SECRETS = {
  envApiKey: `sk-audit${rand(32)}`, // OPENAI_API_KEY: a variable named *KEY*
  envToken: `tok${rand(24)}`, // DEPLOY_TOKEN: a variable named *TOKEN*, no known key shape
  providerKey: `cred${rand(28)}`, // LLM_CREDENTIAL: named only by model_providers.api_key_env_var
  fileGithub: `ghp_${rand(36)}`, // in a repo file the agent reads, and shown by git diff
  filePem: `-----BEGIN PRIVATE KEY-----\nMII${rand(40)}\n-----END PRIVATE KEY-----`,
  briefAws: `AKIA${rand(16).toUpperCase()}`, // in the brief itself
  briefSlack: `xoxb-${rand(24)}`,
};

let s: Scenario;
let worker: Child | undefined;

before(async () => {
  s = await createScenario({
    files: {
      'README.md': '# sample\n',
      'config/credentials.txt': `github=${SECRETS.fileGithub}\nopenai=${SECRETS.envApiKey}\n${SECRETS.filePem}\n`,
    },
    steps: [
      { toolCalls: [{ toolName: 'read_file', input: { path: 'config/credentials.txt' } }] },
      { toolCalls: [{ toolName: 'grep', input: { pattern: 'github=' } }] },
      // The model copies the secrets into a new file and into its inputs: contents become hashes.
      { toolCalls: [{ toolName: 'write_file', input: { path: 'config/credentials.txt', content: `github=${SECRETS.fileGithub}\ntoken=${SECRETS.envToken}\ncred=${SECRETS.providerKey}\n` } }] },
      { toolCalls: [{ toolName: 'run_command', input: { command: 'git diff HEAD~1' } }] },
      { toolCalls: [{ toolName: 'grep', input: { pattern: SECRETS.envToken } }] },
      { toolCalls: [{ toolName: 'run_command', input: { command: 'git status' } }] },
      { text: 'done' },
    ],
  });
  await withWorkspace(s.t.db.app, s.workspaceId, (tx) =>
    upsertModelProvider(tx, { alias: 'hosted', provider: 'openai-compatible', base_url: 'http://127.0.0.1:9/v1', model: 'm', api_key_env_var: 'LLM_CREDENTIAL' }),
  );
});
after(async () => {
  await worker?.stop('SIGKILL', 100);
  await s?.close();
});

test('no planted secret reaches a table, a note, a log line or an event', { timeout: 60_000 }, async () => {
  const { agentRunId } = await s.dispatch({ brief: `Rotate the keys. Old AWS key ${SECRETS.briefAws}, slack ${SECRETS.briefSlack}.` });
  worker = s.spawnWorker({ OPENAI_API_KEY: SECRETS.envApiKey, DEPLOY_TOKEN: SECRETS.envToken, LLM_CREDENTIAL: SECRETS.providerKey, LOG_LEVEL: 'debug' });
  const run = await s.waitForStatus(agentRunId, 'completed');
  await worker.stop('SIGTERM');

  // The run did see the secrets: the diff it ran held them (else the audit proves nothing).
  const history = (await s.checkpoints(agentRunId)).flatMap((r) => r.tool_history as { tool: string; result?: { tail?: string } }[]);
  assert.ok(history.some((h) => h.tool === 'run_command' && h.result?.tail?.includes('[redacted:')), `command output was redacted, not absent: ${JSON.stringify(history.filter((h) => h.tool === 'run_command'))}`);

  const places: [string, string][] = [];
  const tables = await s.su<{ tablename: string }[]>`select tablename from pg_tables where schemaname = 'public'`;
  for (const { tablename } of tables) {
    const rows = await s.su.unsafe(`select row_to_json(t)::text as j from "${tablename}" t`);
    places.push(...rows.map((r): [string, string] => [`table ${tablename}`, r.j as string]));
  }
  const notes = (await git(s.repo, 'notes', `--ref=${s.config.WORKER_NOTES_REF}`, 'list')).split('\n').filter(Boolean);
  assert.ok(notes.length >= 6, 'notes were written');
  for (const line of notes) {
    const [, commit] = line.split(' ');
    places.push([`note on ${commit}`, await git(s.repo, 'notes', `--ref=${s.config.WORKER_NOTES_REF}`, 'show', commit!)]);
  }
  places.push(...worker.lines.map((l): [string, string] => ['worker log', l]));
  assert.ok(places.some(([where]) => where === 'table convoy_events'), 'events were scanned');

  for (const [name, secret] of Object.entries(SECRETS)) {
    const needle = secret.includes('PRIVATE KEY') ? secret.split('\n')[1]! : secret;
    const leaks = places.filter(([, text]) => text.includes(needle)).map(([where]) => where);
    assert.deepEqual(leaks, [], `secret ${name} leaked into: ${[...new Set(leaks)].join(', ')}`);
  }
  assert.equal(run.status, 'completed');
});
