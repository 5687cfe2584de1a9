// A checkpoint remote that needs credentials, over git's smart HTTP (the transport hosted remotes
// speak): WORKER_CHECKPOINT_REMOTE=http://echodo:<password>@127.0.0.1:<port>/remote.git, every
// request refused without them. A run finishes on host A; another is killed there mid-brief and
// host C, with no repository at all, partially clones the remote (its blobs then fetched lazily,
// with the same credentials) and finishes it. The password authenticates every request, and is
// on no disk (no repository's config, worktree or log), in no row, event or log line.
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, realpath, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { parseConfig } from '../core/config.ts';
import { runGit } from '../worker/git/run-git.ts';
import { registerConfigSecrets } from '../worker/secrets.ts';
import type { Child } from './support/child.ts';
import { startGitHttpServer, type GitHttpServer } from '../testbed/git-http.ts';
import { git } from './support/git.ts';
import { assertFinishedOnRemote, finishWith, NO_STANDBY, type Host, type HostsSeen } from './support/hosts.ts';
import { createScenario, sampleSteps, type Scenario } from './support/scenario.ts';

const ROUNDS = 6;
const PASSWORD = `pw-${randomBytes(12).toString('hex')}`;
let s: Scenario;
let server: GitHttpServer;
let hosts: HostsSeen & { root: string; remoteUrl: string; byName: Record<string, Host> };
let baselineTree: string;
/** A blob only on the remote's branch `unread`, which no run checks out: a partial clone lacks it. */
let unreadBlob: string;
const workers: Child[] = [];

/** git as an operator's shell runs it (no prompt for what it lacks); rejects with its stderr. */
const plainGit = (cwd: string, ...args: string[]) =>
  promisify(execFile)('git', args, { cwd, env: { ...process.env, GIT_TERMINAL_PROMPT: '0' } }).catch(
    (err: { stderr?: string }) => {
      throw new Error(err.stderr);
    },
  );

function host(name: string, root: string, repo: string, remoteUrl: string): Host {
  const worktreeBase = path.join(root, `worktrees-${name}`);
  const id = `host-${name}`;
  return {
    name,
    id,
    repo,
    worktreeBase,
    env: {
      WORKER_REPO_ROOT: repo,
      WORKER_WORKTREE_BASE: worktreeBase,
      WORKER_HOST_ID: id,
      WORKER_CHECKPOINT_REMOTE: remoteUrl,
      ...NO_STANDBY,
    },
  };
}

function spawnOn(h: Host, extra: Record<string, string> = {}): Child {
  const w = s.spawnWorker({ ...h.env, ...extra });
  workers.push(w);
  return w;
}

before(async () => {
  const files = {
    'README.md': '# sample\n',
    'src/index.ts': 'export const answer = 42;\n',
    'vendor/data.txt': randomBytes(60_000).toString('base64'),
  };
  s = await createScenario({
    files,
    steps: sampleSteps(40, ROUNDS),
    env: { WORKER_LEASE_MS: '8000', WORKER_HEARTBEAT_MS: '500' },
  });
  const root = await realpath(await mkdtemp(path.join(os.tmpdir(), 'echodo-http-remote-')));
  const remoteDir = path.join(root, 'remote.git');
  await git(root, 'clone', '-q', '--bare', s.repo, remoteDir);
  await git(remoteDir, 'config', 'uploadpack.allowFilter', 'true'); // so host C's clone really is partial
  server = await startGitHttpServer(root, { user: 'echodo', password: PASSWORD });
  const remoteUrl = server.url('remote.git');
  registerConfigSecrets({ WORKER_CHECKPOINT_REMOTE: remoteUrl, WORKER_PROVIDER_KEY_VARS: '' } as never, {}); // as every worker process does at start
  await writeFile(path.join(root, 'unread.txt'), 'never checked out\n');
  unreadBlob = await git(remoteDir, 'hash-object', '-w', path.join(root, 'unread.txt'));
  await rm(path.join(root, 'unread.txt'));
  const unreadTree = execFileSync('git', ['mktree'], {
    cwd: remoteDir,
    input: `100644 blob ${unreadBlob}\tunread.txt\n`,
  })
    .toString()
    .trim();
  await git(
    remoteDir,
    'update-ref',
    'refs/heads/unread',
    await git(
      remoteDir,
      '-c',
      'user.name=Echodo Test',
      '-c',
      'user.email=test@echodo.invalid',
      'commit-tree',
      unreadTree,
      '-m',
      'unread',
    ),
  );
  const a = host('a', root, path.join(root, 'host-a'), remoteUrl);
  await git(root, 'clone', '-q', remoteDir, a.repo); // the operator's clone, made without the credentials
  const c = host('c', root, path.join(root, 'host-c', 'repo'), remoteUrl); // no repository at all
  const byName: Record<string, Host> = { a, c };
  hosts = {
    root,
    remoteDir,
    remoteUrl,
    byName,
    byId: (id) => Object.values(byName).find((h) => h.id === id)!,
    config: (h) => parseConfig({ ...s.env, ...h.env }),
  };
  // The uncrashed run, on host A: its tree is the reference for the resumed one.
  const { agentRunId } = await s.dispatch({ repoPath: undefined });
  const w = spawnOn(a);
  await s.waitForStatus(agentRunId, 'completed', 120_000);
  await w.stop('SIGTERM', 8000);
  baselineTree = await git(a.repo, 'rev-parse', `refs/heads/${(await s.run(agentRunId)).branch}^{tree}`);
  await assertFinishedOnRemote(s, hosts, agentRunId, ROUNDS, baselineTree);
});

after(async () => {
  await Promise.all(workers.map((w) => w.stop('SIGKILL', 100)));
  await server?.stop();
  if (hosts) await rm(hosts.root, { recursive: true, force: true });
  await s?.close();
});

describe('a checkpoint remote over HTTP that needs credentials', () => {
  let agentRunId: string;

  before(async () => {
    ({ agentRunId } = await s.dispatch({ repoPath: undefined }));
    const victim = spawnOn(hosts.byName.a!, {
      ECHODO_FAULT: 'during-model-call@3',
      WORKER_LEASE_MS: '3000',
      WORKER_HEARTBEAT_MS: '300',
    });
    assert.equal((await victim.exited).signal, 'SIGKILL');
    await finishWith(s, spawnOn(hosts.byName.c!), agentRunId);
  });

  test('the remote refuses a request without them', async () => {
    await assert.rejects(
      plainGit(hosts.root, 'ls-remote', server.url('remote.git', { withCredentials: false })),
      /401|Authentication failed|could not read Username/,
    );
    assert.ok((server.counts.denied ?? 0) >= 1);
  });

  test('host C, with no repository, resumed the run from a partial clone: every checkpoint and note on the remote', async () => {
    await assertFinishedOnRemote(s, hosts, agentRunId, ROUNDS, baselineTree);
    const [resumed] = await s.events(agentRunId, 'run_resumed');
    assert.equal(resumed?.metadata.toHost, 'host-c');
    assert.equal(resumed?.metadata.partialClone, true);
    const repo = hosts.byName.c!.repo;
    assert.equal(await git(repo, 'config', 'remote.origin.promisor'), 'true');
    assert.ok(
      (server.counts['git-receive-pack'] ?? 0) > 0 && (server.counts['git-upload-pack'] ?? 0) > 0,
      JSON.stringify(server.counts),
    );
  });

  test("the clone names the remote without its credentials; the worker's git fetches a missing blob with them", async () => {
    const repo = hosts.byName.c!.repo;
    assert.equal(await git(repo, 'config', 'remote.origin.url'), server.url('remote.git', { withCredentials: false }));
    assert.match(
      await git(repo, 'rev-list', '--objects', '--missing=print', 'refs/remotes/origin/unread'),
      new RegExp(`^\\?${unreadBlob}$`, 'm'),
    );
    // Plain git has only the URL on disk: the remote refuses it. The worker's git has the credentials.
    await assert.rejects(
      plainGit(repo, 'cat-file', '-p', unreadBlob),
      /401|Authentication failed|could not read Username/,
    );
    assert.equal((await runGit(repo, ['cat-file', '-p', unreadBlob])).stdout, 'never checked out\n');
  });

  test('the password is on no disk: no repository, worktree or file under any host', async () => {
    const found = await promisify(execFile)('grep', ['-rlF', '--binary-files=text', PASSWORD, hosts.root]).then(
      (r) => r.stdout.trim(),
      (err: { code?: number; stdout?: string }) => (err.code === 1 ? '' : `grep failed: ${String(err.stdout)}`),
    );
    assert.equal(found, '', `files holding the remote's password:\n${found}`);
  });

  test('the password is in no row, event or log line', async () => {
    for (const table of ['agent_runs', 'worker_checkpoints', 'convoy_events']) {
      const [row] = await s.su.unsafe(`select coalesce(string_agg(t::text, ''), '') as text from ${table} t`);
      assert.ok(!String(row!.text).includes(PASSWORD), `${table} holds the remote's password`);
    }
    for (const w of workers) assert.ok(!w.output().includes(PASSWORD), "a worker logged the remote's password");
  });
});
