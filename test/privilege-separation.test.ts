// Nothing that touches an agent's bytes holds a secret or the worker's rights. Each attack is
// planted with tool calls only, in a real worker process with real bubblewrap and git:
// - a nested repository whose own .git/config and info/attributes define a filter that would
//   touch a marker on the host (the worker's git must never run it);
// - a folder the agent wrote into, swapped for a symlink to a host folder by a command of the same
//   step as grep, read_file and write_file (nothing of the host folder may come back or be written);
// - a setuid bit set inside the sandbox (it must not reach the host file);
// - a file name that is not valid UTF-8 (the round fails naming it, escaped).
// Then the tree process itself: no secret in its environment, no way to the database port; and
// the placement rules: a harness without a worktree gets no run_command, ECHODO_HOME inside the
// repo root stops the process.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync, statSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, realpath, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { ConfigError, parseConfig } from '../core/config.ts';
import { SettingRefusedError, harnessInput } from '../operator/settings.ts';
import { probeSandbox } from '../worker/sandbox/index.ts';
import { TreeProcess } from '../worker/tree/process.ts';
import { waitFor, type Child } from './support/child.ts';
import { git, makeRepo } from './support/git.ts';
import { createScenario, type Scenario } from './support/scenario.ts';

const SECRET = `host-secret-${randomBytes(12).toString('hex')}`;
const KEY = `sk-live-${randomBytes(20).toString('hex')}`;

let s: Scenario;
let worker: Child;
let host: string;
let marker: string;

/** The repository's test script: one case per attack, run by `npm test -- <case>` in the sandbox. */
function script(hostDir: string, markerPath: string): string {
  return [
    'set -e',
    'case "$1" in',
    // A nested repository whose filter would touch the marker, defined where git reads it.
    `nest) mkdir -p nested && cd nested && git init -q . && printf '[filter "evil"]\\n\\tclean = touch ${markerPath}-clean\\n\\tsmudge = touch ${markerPath}-smudge\\n\\tprocess = touch ${markerPath}-process\\n' >> .git/config && mkdir -p .git/info && echo '* filter=evil' > .git/info/attributes && echo '* filter=evil' > .gitattributes && echo inner > inner.txt && echo RESULT nested ;;`,
    // The folder the tools wrote into becomes a link to a host folder, while the other tools run.
    `swap) sleep 0.3; rm -rf data && ln -s ${hostDir} data && echo RESULT swapped ;;`,
    'suid) echo x > tool.sh && chmod 4755 tool.sh && echo RESULT suid ;;',
    `badname) printf 'b' > "$(printf 'bad\\377name.txt')" && echo RESULT badname ;;`,
    'esac',
  ].join('\n');
}

before(async () => {
  host = await realpath(await mkdtemp(path.join(os.tmpdir(), 'echodo-privsep-host-')));
  await writeFile(path.join(host, 'a.txt'), `${SECRET}\n`);
  marker = path.join(host, 'marker');
  const steps = [
    { toolCalls: [{ toolName: 'write_file', input: { path: 'data/a.txt', content: 'ours\n' } }] },
    {
      toolCalls: [
        { toolName: 'run_command', input: { command: 'npm test -- swap' } },
        { toolName: 'grep', input: { pattern: 'host-secret', path: 'data' } },
        { toolName: 'read_file', input: { path: 'data/a.txt' } },
        { toolName: 'write_file', input: { path: 'data/b.txt', content: 'through the link?\n' } },
      ],
    },
    // After the swap: every tool again, now that the link is in place.
    {
      toolCalls: [
        { toolName: 'grep', input: { pattern: 'host-secret' } },
        { toolName: 'read_file', input: { path: 'data/a.txt' } },
        { toolName: 'write_file', input: { path: 'data/c.txt', content: 'through the link?\n' } },
      ],
    },
    { toolCalls: [{ toolName: 'run_command', input: { command: 'npm test -- nest' } }] },
    { toolCalls: [{ toolName: 'write_file', input: { path: 'nested/more.txt', content: 'more\n' } }] },
    { toolCalls: [{ toolName: 'run_command', input: { command: 'git status --short' } }] },
    { toolCalls: [{ toolName: 'run_command', input: { command: 'npm test -- suid' } }] },
    { toolCalls: [{ toolName: 'run_command', input: { command: 'npm test -- badname' } }] },
    { text: 'Done.' },
  ];
  s = await createScenario({
    steps,
    files: {
      'README.md': '# r\n',
      'package.json': JSON.stringify({ name: 'p', version: '1.0.0', scripts: { test: 'sh t.sh' } }),
      't.sh': script(host, marker),
    },
    env: {
      OPENAI_API_KEY: KEY,
      WORKER_MAX_TOOL_STEPS: '20',
      WORKER_LEASE_MS: '30000',
      WORKER_HEARTBEAT_MS: '1000',
      WORKER_COMMAND_TIMEOUT_MS: '20000',
    },
  });
  worker = s.spawnWorker({ WORKER_ID: 'privsep-worker' });
  await worker.waitForLine(/"worker started"/);
});

after(async () => {
  await worker?.stop('SIGTERM', 5000);
  await s?.close();
  await rm(host, { recursive: true, force: true });
});

describe('attacks planted with tool calls only', () => {
  let agentRunId: string;
  let run: Record<string, any>;
  let records: any[];
  let everything: string;

  before(async () => {
    ({ agentRunId } = await s.dispatch({ briefId: 'brief-privsep' }));
    run = await waitFor(
      async () => {
        const row = await s.run(agentRunId);
        return row.status === 'completed' || row.status === 'failed' ? row : undefined;
      },
      { timeoutMs: 180_000, what: 'the run to end' },
    ).catch((err: Error) => {
      throw new Error(`${err.message}\n${worker.output().slice(-5000)}`);
    });
    const rows = await s.checkpoints(agentRunId);
    records = rows.flatMap((r) => r.tool_history as any[]);
    const commits = await git(s.repo, 'log', '-p', '--no-ext-diff', '--no-textconv', '--binary', run.branch);
    const notes = await git(s.repo, 'log', '-p', s.config.WORKER_NOTES_REF).catch(() => '');
    everything = JSON.stringify([rows, run, await s.events(agentRunId)]) + commits + notes + worker.output();
  });

  test('the worker logged that its trees are confined', () => {
    assert.ok(
      worker.lines.some((l) => l.includes('"trees confined"')),
      worker.output().slice(-3000),
    );
  });

  test("no host process ran the nested repository's filter", () => {
    for (const suffix of ['clean', 'smudge', 'process'])
      assert.equal(existsSync(`${marker}-${suffix}`), false, `${marker}-${suffix}`);
    const nest = records.find((r) => r.input?.command === 'npm test -- nest');
    assert.match(nest.result.tail, /RESULT nested/);
    assert.match(nest.result.note ?? '', /"nested" is a git repository of its own: not checkpointed/);
  });

  test('the nested repository is never recorded as a gitlink', async () => {
    const tree = await git(s.repo, 'ls-tree', '-r', run.branch);
    assert.doesNotMatch(tree, /^160000 /m, tree);
  });

  test('nothing of the host folder came back, was committed or was written through the link', async () => {
    assert.ok(records.some((r) => r.input?.command === 'npm test -- swap' && /RESULT swapped/.test(r.result.tail)));
    assert.equal(
      everything.includes(SECRET),
      false,
      "the host file's content is in no row, commit, note, event or log line",
    );
    assert.equal(existsSync(path.join(host, 'b.txt')), false, 'b.txt was not written into the host folder');
    assert.equal(existsSync(path.join(host, 'c.txt')), false, 'c.txt was not written into the host folder');
    assert.equal(await readFile(path.join(host, 'a.txt'), 'utf8'), `${SECRET}\n`, 'the host file is untouched');
    const afterSwap = records.filter((r) => r.input?.path === 'data/a.txt' || r.input?.path === 'data/c.txt');
    assert.ok(
      afterSwap.some((r) => r.ok === false),
      `a tool through the link was refused: ${JSON.stringify(afterSwap)}`,
    );
  });

  test('a setuid bit set in the sandbox does not reach the host file', () => {
    assert.ok(records.some((r) => r.input?.command === 'npm test -- suid' && /RESULT suid/.test(r.result.tail)));
    const mode = statSync(path.join(run.worktree_path, 'tool.sh')).mode;
    assert.equal(mode & 0o6000, 0, `mode ${mode.toString(8)}`);
  });

  test('a file name that is not valid UTF-8 fails the round, naming it escaped', () => {
    assert.equal(run.status, 'failed', `status ${run.status}`);
    assert.match(run.failure_reason, /bad\\uFFFDname\.txt|bad\uFFFDname\.txt/);
    assert.match(run.failure_reason, /not valid UTF-8/);
  });

  test('no planted key is in any row, commit, note or log line', () => {
    assert.equal(everything.includes(KEY), false);
  });
});

describe('the tree process', () => {
  test('holds no secret in its environment and cannot reach the database port', async () => {
    const probed = await probeSandbox({ mode: 'bwrap' });
    assert.ok(probed.mode === 'bwrap' && probed.usable, 'bwrap is usable here');
    const root = await realpath(await makeRepo({ 'a.txt': 'a\n' }));
    process.env.ECHODO_TEST_SECRET = SECRET; // in this process: must not cross into the tree process
    const tree = await TreeProcess.start({ bwrap: probed.bwrap, toolchain: probed.toolchain }, root);
    try {
      const environ = await tree.run(['cat', '/proc/self/environ']);
      const text = environ.stdout.toString('utf8');
      assert.match(text, /HOME=\/home\/sandbox/);
      for (const leak of [SECRET, 'DATABASE_URL', 'DATABASE_APP_URL', 'REDIS_URL', s.env.DATABASE_URL!]) {
        assert.equal(text.includes(leak), false, `${leak} is not in the tree process's environment`);
      }
      const server = await tree.run([
        'sh',
        '-c',
        'tr "\\0" "\\n" < /proc/1/environ; tr "\\0" "\\n" < /proc/$PPID/environ',
      ]);
      assert.equal(server.stdout.toString('utf8').includes(SECRET), false);
      assert.equal((await tree.ping()).uid, 65534, 'it runs as the unprivileged sandbox user');
      const port = new URL(s.env.DATABASE_URL!).port || '5432';
      const connect = `require('net').connect(${port}, '127.0.0.1').on('connect', () => { console.log('CONNECTED'); process.exit(0); }).on('error', (e) => { console.log(e.code); process.exit(0); })`;
      const reached = await tree.run(['node', '-e', connect], { timeoutMs: 10_000 });
      assert.match(reached.stdout.toString('utf8'), /ECONNREFUSED|ENETUNREACH/);
      const ls = await tree.run(['sh', '-c', `ls ${s.env.ECHODO_HOME} ${os.tmpdir()} 2>&1; true`]);
      assert.doesNotMatch(ls.stdout.toString('utf8'), /app-role\.json/, 'ECHODO_HOME is not visible');
    } finally {
      delete process.env.ECHODO_TEST_SECRET;
      tree.close();
      await rm(root, { recursive: true, force: true });
    }
  });
});

describe('placement rules', () => {
  test('a harness without a worktree cannot be given commands', () => {
    assert.throws(() => harnessInput({ alias: 'docs2', worktree: false, allow: ['npm test'] }), SettingRefusedError);
    assert.equal(harnessInput({ alias: 'docs2', worktree: false }).needs_worktree, false);
  });

  test('ECHODO_HOME inside WORKER_REPO_ROOT or WORKER_WORKTREE_BASE stops the process, naming the variables', async () => {
    const repo = await mkdtemp(path.join(os.tmpdir(), 'echodo-placement-'));
    try {
      await mkdir(path.join(repo, '.echodo'));
      const base = { WORKER_REPO_ROOT: repo, WORKER_WORKTREE_BASE: path.join(os.tmpdir(), 'echodo-wt-elsewhere') };
      assert.throws(
        () => parseConfig({ ...base, ECHODO_HOME: path.join(repo, '.echodo') }),
        (err: unknown) =>
          err instanceof ConfigError && /ECHODO_HOME/.test(err.message) && /WORKER_REPO_ROOT/.test(err.message),
      );
      assert.throws(
        () =>
          parseConfig({
            ...base,
            WORKER_WORKTREE_BASE: repo,
            WORKER_REPO_ROOT: os.tmpdir() + '/x',
            ECHODO_HOME: path.join(repo, '.echodo'),
          }),
        (err: unknown) => err instanceof ConfigError && /WORKER_WORKTREE_BASE/.test(err.message),
      );
      const fine = parseConfig({ WORKER_REPO_ROOT: repo });
      assert.equal(fine.ECHODO_HOME.startsWith(repo), false, 'the default home lies outside the repo root');
    } finally {
      await rm(repo, { recursive: true, force: true });
    }
  });
});
