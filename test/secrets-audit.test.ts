// The secrets audit: distinct secrets planted in every place they could come from, then every
// table, every git note, every commit message, the Redis dead-letter list and every worker log
// line is scanned for each of them, and for fragments of them (a prefix, a middle, a suffix: what
// a truncation before redaction leaves behind). Planted in:
//  - the worker's environment (a *KEY* variable, a *TOKEN* variable), and a variable whose name
//    has none of KEY/TOKEN/SECRET/PASSWORD, named only by ANOTHER workspace's provider row (a row
//    written before WORKER_PROVIDER_KEY_VARS existed: the worker registers it at start-up);
//  - DATABASE_URL's password, printed by a `git diff` of a file holding the URL;
//  - command output, a key-shaped token straddling the 400-character tail cut of tool_history;
//  - a provider's 401 error body echoing `Authorization: Bearer <key>` (reproduction 2): the
//    failure reason and the run_failed event;
//  - dead letters: a job for an unknown workspace whose brief holds keys, and a job whose
//    unknown field is named by a key (the reason echoes it);
//  - a repo file the agent reads, and the brief itself.
// Commands are plain `git`, so this holds with or without the run_command sandbox.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { Redis } from 'ioredis';
import { createWorkspace } from '../store/runs.ts';
import { upsertModelProvider } from '../store/settings-lookup.ts';
import { grantKey } from './support/grants.ts';
import { withWorkspace } from '../store/workspace.ts';
import { waitFor, type Child } from './support/child.ts';
import { startChatServer, type ChatServer } from './support/chat-server.ts';
import { git } from './support/git.ts';
import { startRedis, type RedisServer } from '../testbed/redis.ts';
import { createScenario, type Scenario } from './support/scenario.ts';
import { recordToolCall } from '../worker/checkpoints/history.ts';
import { maskedConfig } from '../core/config.ts';
import { redactString, redactValue, registerUrlCredentials, storableText } from '../core/redact.ts';
import { createLogger } from '../worker/log.ts';
import { deadLetterReason, deadLetterText } from '../worker/queue/postgres.ts';
import { remoteForGit, safeGitEnv } from '../worker/git/run-git.ts';
import { registerConfigSecrets } from '../worker/secrets.ts';

const rand = (n: number) => randomBytes(n).toString('hex').slice(0, n);
const TAIL_CHARS = 400; // worker/checkpoints/history.ts
const SECRETS: Record<string, string> = {
  envApiKey: `sk-audit${rand(32)}`, // OPENAI_API_KEY: a variable named *KEY*
  envToken: `tok${rand(24)}`, // DEPLOY_TOKEN: a variable named *TOKEN*, no known key shape
  otherWorkspaceKey: `cred${rand(28)}`, // LLM_AUTH_VALUE: named only by workspace "other"'s provider row
  providerKey: `sk-live-${rand(40)}`, // AUDIT_API_KEY: echoed back by the provider's 401 body
  straddling: `sk-proj-${rand(48)}`, // in command output, across the tail cut; registered nowhere
  fileGithub: `ghp_${rand(36)}`, // in a repo file the agent reads, and shown by git diff
  filePem: `MII${rand(40)}`, // the body of a PEM private key in that file
  briefAws: `AKIA${rand(16).toUpperCase()}`, // in the brief itself
  briefSlack: `xoxb-${rand(24)}`,
  deadBearer: `dl${rand(30)}`, // after "Bearer" in a dead-lettered job's brief
  deadField: `sk-field${rand(24)}`, // an unknown field's name: the dead letter's reason echoes it
};
const FRAGMENT = 12;

let redis: RedisServer;
let chat: ChatServer;
let s: Scenario;
let worker: Child | undefined;
let dbPassword: string;

before(async () => {
  const started = await startRedis();
  if (!started) throw new Error('redis-server is needed for the dead-letter part of the secrets audit');
  redis = started;
  chat = await startChatServer([
    {
      status: 401,
      error: `Incorrect API key provided. You sent: Authorization: Bearer ${SECRETS.providerKey} (key ${SECRETS.providerKey})`,
    },
  ]);
  s = await createScenario({
    env: { REDIS_URL: redis.url },
    files: {
      'README.md': '# sample\n',
      'notes.txt': 'old notes\n',
      'config/credentials.txt': `github=${SECRETS.fileGithub}\nopenai=${SECRETS.envApiKey}\n-----BEGIN PRIVATE KEY-----\n${SECRETS.filePem}\n-----END PRIVATE KEY-----\n`,
    },
    steps: [], // written below, once DATABASE_URL is known
  });
  dbPassword = decodeURIComponent(new URL(s.env.DATABASE_URL!).password);
  assert.ok(dbPassword.length >= 8, 'the test database URL has a password to plant');
  SECRETS.dbPassword = dbPassword;

  // The last lines of notes.txt: a key straddling the tail cut, then the database URL and the
  // other workspace's key, wholly inside the tail. `+` and `\n` are git diff's framing.
  const lineA = `db=${s.env.DATABASE_URL}`;
  const lineB = `auth=${SECRETS.otherWorkspaceKey}`;
  const afterKey = TAIL_CHARS - Math.floor(SECRETS.straddling!.length / 2);
  const pad = 'y'.repeat(afterKey - 2 - (lineA.length + 2) - (lineB.length + 2));
  const notes = `new notes\n${SECRETS.straddling} ${pad}\n${lineA}\n${lineB}\n`;
  await writeFile(
    s.transcriptPath,
    JSON.stringify({
      steps: [
        { toolCalls: [{ toolName: 'read_file', input: { path: 'config/credentials.txt' } }] },
        { toolCalls: [{ toolName: 'grep', input: { pattern: 'github=' } }] },
        // The model copies secrets into files and into its inputs: contents become hashes.
        {
          toolCalls: [
            {
              toolName: 'write_file',
              input: {
                path: 'config/credentials.txt',
                content: `github=${SECRETS.fileGithub}\ntoken=${SECRETS.envToken}\n`,
              },
            },
            { toolName: 'write_file', input: { path: 'notes.txt', content: notes } },
          ],
        },
        { toolCalls: [{ toolName: 'run_command', input: { command: 'git diff HEAD~1' } }] },
        { toolCalls: [{ toolName: 'grep', input: { pattern: SECRETS.envToken } }] },
        { toolCalls: [{ toolName: 'run_command', input: { command: 'git status' } }] },
        { text: 'done' },
      ],
    }),
  );

  await grantKey(s.su, s.workspaceId, 'AUDIT_API_KEY');
  await withWorkspace(s.t.db.app, s.workspaceId, (tx) =>
    upsertModelProvider(tx, {
      alias: 'hosted',
      provider: 'openai-compatible',
      base_url: chat.baseURL,
      model: 'm',
      api_key_env_var: 'AUDIT_API_KEY',
    }),
  );
  // Another workspace's row, written before the WORKER_PROVIDER_KEY_VARS rule (by hand: the
  // store refuses it now), names a variable no name pattern would flag.
  await withWorkspace(s.t.db.app, 'other', (tx) => createWorkspace(tx));
  await s.su`insert into model_providers (workspace_id, alias, provider, base_url, model, api_key_env_var)
             values ('other', 'legacy', 'openai-compatible', 'http://127.0.0.1:9/v1', 'm', 'LLM_AUTH_VALUE')`;
});

after(async () => {
  await worker?.stop('SIGKILL', 100);
  await chat?.close();
  await s?.close();
  await redis?.stop();
});

test(
  'no planted secret, nor a fragment of one, reaches a table, a note, a commit, a dead letter or a log line',
  { timeout: 240_000 },
  async () => {
    const commandRun = await s.dispatch({
      brief: `Rotate the keys. Old AWS key ${SECRETS.briefAws}, slack ${SECRETS.briefSlack}.`,
    });
    const failingRun = await s.dispatch({ model: 'hosted', brief: 'Call the hosted model.' });
    const job = { convoyId: 'c', briefId: 'b', roleId: 'coder', baseRef: 'main', model: `replay:${s.transcriptPath}` };
    const producer = new Redis(redis.url);
    try {
      await producer.rpush(
        s.config.WORKER_QUEUE_KEY,
        JSON.stringify({
          ...job,
          workspaceId: 'ghost',
          brief: `use ${SECRETS.briefAws} with Bearer ${SECRETS.deadBearer}`,
        }),
        JSON.stringify({ ...job, workspaceId: s.workspaceId, brief: 'x', [SECRETS.deadField!]: true }),
      );
    } finally {
      producer.disconnect();
    }
    worker = s.spawnWorker({
      WORKER_LEASE_MS: '15000', // nothing here is about stalls: calm on a loaded machine
      WORKER_HEARTBEAT_MS: '500',
      OPENAI_API_KEY: SECRETS.envApiKey!,
      DEPLOY_TOKEN: SECRETS.envToken!,
      LLM_AUTH_VALUE: SECRETS.otherWorkspaceKey!,
      AUDIT_API_KEY: SECRETS.providerKey!,
      LOG_LEVEL: 'debug',
    });
    const done = await s.waitForStatus(commandRun.agentRunId, 'completed', 150_000);
    const failed = await s.waitForStatus(failingRun.agentRunId, 'failed', 60_000);
    const deadLetters = await waitFor(
      async () => {
        const rows = await s.su<{ reason: string; raw: string }[]>`select reason, raw from dead_letters order by id`;
        return rows.length >= 2 ? rows : undefined;
      },
      { timeoutMs: 60_000, what: 'two dead letters' },
    );
    await worker.stop('SIGTERM');

    // --- The audit proves something only if each secret really passed through.
    assert.equal(
      chat.requests[0]?.headers.authorization,
      `Bearer ${SECRETS.providerKey}`,
      'the provider got the key and echoed it',
    );
    assert.match(
      failed.failure_reason,
      /Incorrect API key provided/,
      `the failure reason is the provider's: ${failed.failure_reason}`,
    );
    assert.match(failed.failure_reason, /\[redacted/, failed.failure_reason);
    const [runFailed] = await s.events(failingRun.agentRunId, 'run_failed');
    assert.match(
      JSON.stringify(runFailed?.metadata),
      /Incorrect API key provided.*\[redacted/,
      'the run_failed event carries the redacted reason',
    );
    assert.ok(
      deadLetters.some((d) => d.raw.includes('ghost') && d.raw.includes('[redacted')),
      `a dead letter kept the redacted job: ${JSON.stringify(deadLetters)}`,
    );
    assert.ok(
      deadLetters.some((d) => /unknown field/.test(d.reason) && d.reason.includes('[redacted')),
      `a dead letter's reason names the redacted field: ${JSON.stringify(deadLetters)}`,
    );

    const checkpoints = await s.checkpoints(commandRun.agentRunId);
    // Every row's history (a row may hold only the rounds since the previous one).
    const history = checkpoints.flatMap(
      (c) => c.tool_history as { tool: string; input: { command?: string }; result?: { tail?: string } }[],
    );
    const diff = history.find((h) => h.tool === 'run_command' && h.input.command === 'git diff HEAD~1');
    const tail = diff?.result?.tail ?? '';
    assert.ok(
      tail.endsWith(`+auth=[redacted:LLM_AUTH_VALUE]\n`),
      `another workspace's key variable was redacted by name: ${tail}`,
    );
    assert.ok(
      tail.includes('+db=postgres://postgres:[redacted:'),
      `DATABASE_URL keeps its user, not its password: ${tail}`,
    );
    // The straddle was real: in what git diff printed, the tail cut lies inside the key.
    const cp = checkpoints.find((c) => c.step === 3) ?? checkpoints[2]!;
    const raw = `${await git(s.repo, 'diff', `${cp.commit_oid}~1`, cp.commit_oid)}\n`;
    const at = raw.indexOf(SECRETS.straddling!);
    const cut = raw.length - TAIL_CHARS;
    assert.ok(
      at >= 0 && at < cut && cut < at + SECRETS.straddling!.length,
      `the tail cut (${cut}) falls inside the key (${at}..${at + SECRETS.straddling!.length})`,
    );
    assert.equal(done.status, 'completed');

    // --- Everything persisted or logged.
    const places: [string, string][] = [];
    const tables = await s.su<{ tablename: string }[]>`select tablename from pg_tables where schemaname = 'public'`;
    for (const { tablename } of tables) {
      const rows = await s.su.unsafe(`select row_to_json(t)::text as j from "${tablename}" t`);
      places.push(...rows.map((r): [string, string] => [`table ${tablename}`, r.j as string]));
    }
    for (const table of ['agent_runs', 'worker_checkpoints', 'convoy_events', 'dead_letters', 'model_providers']) {
      assert.ok(
        places.some(([where]) => where === `table ${table}`),
        `table ${table} has rows to scan`,
      );
    }
    const notesRefs = (await git(s.repo, 'for-each-ref', '--format=%(refname)', 'refs/notes/'))
      .split('\n')
      .filter(Boolean);
    let noteCount = 0;
    for (const ref of notesRefs) {
      for (const line of (await git(s.repo, 'notes', `--ref=${ref}`, 'list')).split('\n').filter(Boolean)) {
        const [, commit] = line.split(' ');
        places.push([`note ${ref} on ${commit}`, await git(s.repo, 'notes', `--ref=${ref}`, 'show', commit!)]);
        noteCount++;
      }
    }
    assert.ok(noteCount >= 6, `notes were written (${noteCount})`);
    places.push(['commit messages', await git(s.repo, 'log', '--all', '--format=%H %an%n%B')]);
    const inspector = new Redis(redis.url);
    try {
      const deadList = await inspector.lrange(`${s.config.WORKER_QUEUE_KEY}:dead`, 0, -1);
      assert.ok(deadList.length >= 2, 'the Redis dead-letter list has the entries');
      places.push(...deadList.map((d): [string, string] => ['redis dead list', d]));
    } finally {
      inspector.disconnect();
    }
    assert.ok(worker.lines.length > 20, 'the worker logged (at debug level)');
    places.push(...worker.lines.map((l): [string, string] => ['worker log', l]));

    for (const [name, secret] of Object.entries(SECRETS)) {
      const mid = Math.floor((secret.length - FRAGMENT) / 2);
      const needles = [secret, secret.slice(0, FRAGMENT), secret.slice(mid, mid + FRAGMENT), secret.slice(-FRAGMENT)];
      const leaks = places.filter(([, text]) => needles.some((n) => text.includes(n))).map(([where]) => where);
      assert.deepEqual(
        [...new Set(leaks)],
        [],
        `secret ${name} (or a ${FRAGMENT}-char fragment of it) leaked into: ${[...new Set(leaks)].join(', ')}`,
      );
    }
  },
);

// The same promises at unit level, fast: each path's cut comes after redaction.
test('a key straddling the tool-history tail cut is redacted whole, not stored minus its head', () => {
  const key = `sk-unit${rand(40)}`;
  const output = `${'x'.repeat(1000)}\n${key}${'y'.repeat(TAIL_CHARS - 20)}`; // the cut lands 20 chars before the key's end
  const record = recordToolCall({
    round: 1,
    tool: 'run_command',
    input: { command: 'git diff' },
    output: { exitCode: 0, stdout: output, stderr: '' },
  });
  const tail = (record.result as { tail: string }).tail;
  assert.ok(tail.length <= TAIL_CHARS, 'still a tail');
  assert.ok(!tail.includes(key.slice(-20)), `no fragment of the key: ${tail.slice(0, 60)}`);
  assert.ok(
    tail.startsWith('sk]') || tail.includes('[redacted'),
    `the tail starts inside the marker, not the key: ${tail.slice(0, 60)}`,
  );
});

test('a dead letter is redacted before it is capped, and its reason too', () => {
  const key = `sk-dead${rand(40)}`;
  const raw = `${'z'.repeat(64 * 1024 - 21)} ${key} ${'z'.repeat(100)}`; // the key straddles the 64 Ki cap
  const stored = deadLetterText(raw);
  assert.ok(!stored.includes(key.slice(0, 16)), 'no head of the key at the cap');
  assert.ok(stored.length <= 64 * 1024 + 100, `capped (${stored.length})`);
  const huge = `${key} ${'q'.repeat(10 * 1024 * 1024)}`;
  const t0 = performance.now();
  assert.ok(!deadLetterText(huge).includes(key.slice(4, 20)), 'a 10 MB message: redacted');
  assert.ok(performance.now() - t0 < 2000, 'a 10 MB message costs little (only a window is redacted)');
  assert.match(deadLetterReason(`invalid job: unknown field(s): ${key}`), /unknown field\(s\): \[redacted:sk\]/);
});

test('the failure reason and event metadata are redacted at the store boundary, whoever calls', () => {
  assert.equal(
    storableText(`401: Incorrect API key provided: Bearer live-${rand(20)}`),
    '401: Incorrect API key provided: Bearer [redacted:bearer]',
  );
  assert.equal(storableText('Authorization: Basic dXNlcjpwYXNzd29yZA=='), 'Authorization: [redacted:authorization]');
  assert.equal(storableText('postgres://app:s3cret-pw@db:5432/x'), 'postgres://app:[redacted:password]@db:5432/x');
  const metadata = redactValue({ reason: `key ${SECRETS.briefAws}`, nested: { list: [`xoxb-${rand(20)}`] } });
  assert.deepEqual(metadata, { reason: 'key [redacted:aws-key]', nested: { list: ['[redacted:slack-token]'] } });
});

test('registered URL credentials keep the user; a log line is redacted in its message, fields and bindings', () => {
  const password = `pw${rand(20)}`;
  registerUrlCredentials({ DATABASE_URL: `postgres://svc:${encodeURIComponent(password)}@127.0.0.1/db` });
  assert.equal(
    redactString(`connect failed for svc with ${password}`),
    'connect failed for svc with [redacted:DATABASE_URL password]',
  );
  const lines: string[] = [];
  const log = createLogger({
    level: 'info',
    destination: {
      write: (l: string) => {
        lines.push(l);
        return true;
      },
    } as never,
  }).child({ bound: password });
  log.info({ deep: { a: { b: { c: { d: { e: { f: { g: password } } } } } } } }, `message ${password}`);
  assert.equal(lines.length, 1);
  assert.ok(!lines[0]!.includes(password), lines[0]);
  assert.match(lines[0]!, /message \[redacted:DATABASE_URL password\]/);
});

test('a checkpoint remote over http(s): a token given as the user is a secret too (a user elsewhere is not)', () => {
  const token = `tok${rand(24)}`;
  registerUrlCredentials({
    WORKER_CHECKPOINT_REMOTE: `https://${token}@git.example.com/acme/repo.git`,
    DATABASE_URL: 'postgres://svcuser@127.0.0.1/db',
  });
  assert.equal(
    redactString(`fatal: unable to access ${token}`),
    'fatal: unable to access [redacted:WORKER_CHECKPOINT_REMOTE token]',
  );
  assert.equal(redactString('role svcuser'), 'role svcuser');
  const masked = maskedConfig({ WORKER_CHECKPOINT_REMOTE: `https://${token}@git.example.com/acme/repo.git` } as never);
  assert.equal(masked.WORKER_CHECKPOINT_REMOTE, 'https://***@git.example.com/acme/repo.git');
});

test('git is given a remote URL without its credentials, and gets them from its environment as a rewrite', async () => {
  const token = `tok${rand(24)}`;
  assert.equal(
    remoteForGit(`https://x-access-token:${token}@git.example.com/acme/repo.git`),
    'https://git.example.com/acme/repo.git',
  );
  assert.equal(remoteForGit(`http://${token}@127.0.0.1:8080/repo.git`), 'http://127.0.0.1:8080/repo.git');
  for (const untouched of [
    'ssh://git@git.example.com/acme/repo.git',
    'git@git.example.com:acme/repo.git',
    'git://127.0.0.1/repo.git',
    '/srv/git/repo.git',
    'origin',
  ]) {
    assert.equal(remoteForGit(untouched), untouched);
  }
  const env = await safeGitEnv(os.tmpdir());
  const pairs = Array.from(
    { length: Number(env.GIT_CONFIG_COUNT) },
    (_, i) => `${env[`GIT_CONFIG_KEY_${i}`]}=${env[`GIT_CONFIG_VALUE_${i}`]}`,
  );
  assert.ok(
    pairs.includes(
      `url.https://x-access-token:${token}@git.example.com/acme/repo.git.insteadOf=https://git.example.com/acme/repo.git`,
    ),
    pairs.join('\n'),
  );
  assert.ok(pairs.includes(`url.http://${token}@127.0.0.1:8080/repo.git.insteadOf=http://127.0.0.1:8080/repo.git`));
});

test('without DATABASE_URL, the embedded superuser password in ECHODO_HOME is registered too', async () => {
  const home = await mkdtemp(path.join(os.tmpdir(), 'echodo-secrets-home-'));
  const password = `emb${rand(24)}`;
  await mkdir(path.join(home, 'pg'), { recursive: true });
  await writeFile(path.join(home, 'pg', 'password'), `${password}\n`);
  registerConfigSecrets({ ECHODO_HOME: home, WORKER_PROVIDER_KEY_VARS: '*_API_KEY' } as never, {});
  assert.equal(
    redactString(`server.json: postgres://postgres:${password}@127.0.0.1:5432/x`),
    'server.json: postgres://postgres:[redacted:embedded superuser password]@127.0.0.1:5432/x',
  );
  await rm(home, { recursive: true, force: true });
});
