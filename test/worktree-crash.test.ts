// A worker killed inside `git worktree add` must not break later runs. Every half-made
// state git can leave is planted next to a healthy worktree of another run; new runs, the resume
// of the damaged run, SIGKILLs at the worktree fault points and four workers racing on one
// repository must all end in completed runs, and the healthy worktree must not be touched.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createWriteStream, existsSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm, stat, symlink, unlink, utimes, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { createLogger } from '../worker/log.ts';
import { withFileLock } from '../core/file-lock.ts';
import { prepareWorktree } from '../worker/worktrees/worktree.ts';
import { waitFor, type Child } from './support/child.ts';
import { git, makeRepo } from './support/git.ts';
import { assertCompletedLike, finishAll as finishAllRuns } from './support/finish.ts';
import { createScenario, sampleSteps, type Scenario } from './support/scenario.ts';

const log = createLogger({ level: 'silent' });

/** The half-made states, each planted into a healthy worktree (its folder, its admin folder). */
const STATES: Record<string, (wt: string, admin: string) => Promise<void>> = {
  'admin folder with gitdir only': async (_wt, admin) => {
    for (const f of await readdir(admin))
      if (f !== 'gitdir') await rm(path.join(admin, f), { recursive: true, force: true });
  },
  'empty commondir': async (_wt, admin) => {
    await writeFile(path.join(admin, 'commondir'), '');
    await writeFile(path.join(admin, 'locked'), 'initializing');
  },
  'missing HEAD': async (_wt, admin) => unlink(path.join(admin, 'HEAD')),
  'worktree folder without .git file': async (wt) => unlink(path.join(wt, '.git')),
  '.git file pointing at a missing admin folder': async (_wt, admin) => rm(admin, { recursive: true, force: true }),
};

async function adminOf(wt: string): Promise<string> {
  return (await readFile(path.join(wt, '.git'), 'utf8')).trim().replace(/^gitdir:\s*/, '');
}

/** Everything about a worktree that a repair could change: pointer, admin files, HEAD, status, files. */
async function snapshot(wt: string) {
  const admin = await adminOf(wt);
  const adminFiles: Record<string, string> = {};
  for (const f of ['gitdir', 'commondir', 'HEAD']) adminFiles[f] = await readFile(path.join(admin, f), 'utf8');
  return {
    admin,
    adminFiles,
    index: existsSync(path.join(admin, 'index')),
    head: await git(wt, 'rev-parse', 'HEAD'),
    status: await git(wt, 'status', '--porcelain'),
    files: (await readdir(wt)).sort(),
  };
}

describe('half-made worktree states, repaired in place (in process)', () => {
  let repo: string;
  let base: string;
  let healthy: string;
  let healthyBefore: Awaited<ReturnType<typeof snapshot>>;
  const make = (agentRunId: string, extra: Record<string, string> = {}) =>
    prepareWorktree({
      repoPath: repo,
      worktreeBase: base,
      workspaceId: 'ws',
      agentRunId,
      briefId: `b-${agentRunId}`,
      baseRef: 'main',
      log,
      ...extra,
    });

  before(async () => {
    repo = await makeRepo({ 'README.md': '# r\n', 'src/a.ts': 'export const a = 1;\n' });
    base = path.join(await mkdtemp(path.join(os.tmpdir(), 'echodo-wtcrash-')), 'base');
    healthy = (await make('healthy-run')).path;
    healthyBefore = await snapshot(healthy);
  });

  for (const [name, plant] of Object.entries(STATES)) {
    test(`${name}: a new run and the damaged run's own re-make both work; the healthy worktree is untouched`, async () => {
      const id = `victim-${name.replace(/\W+/g, '-')}`;
      const victim = await make(id);
      await writeFile(path.join(victim.path, 'src', 'a.ts'), 'changed by the run\n');
      await git(victim.path, 'commit', '-qam', 'work of the victim');
      const tip = await git(victim.path, 'rev-parse', 'HEAD');
      await plant(victim.path, await adminOf(victim.path));
      if (name === 'empty commondir') {
        // What the issue saw: plain git can make no worktree at all on this repository now.
        await assert.rejects(git(repo, 'worktree', 'add', '-q', path.join(base, 'ws', 'plain'), 'main'), /commondir/);
      }

      const fresh = await make(`new-after-${id}`);
      assert.ok(fresh.created);
      assert.equal(await git(fresh.path, 'status', '--porcelain'), '');
      assert.equal(await readFile(path.join(fresh.path, 'src', 'a.ts'), 'utf8'), 'export const a = 1;\n');

      // The damaged run's own worktree (as resume calls it: its branch, its path): made again.
      const again = await make(id, { branch: victim.branch, worktreePath: victim.path });
      assert.ok(again.created, 'the half-made worktree was made again');
      assert.equal(await git(again.path, 'rev-parse', 'HEAD'), tip, 'at the branch tip: nothing of the run lost');
      assert.equal(await git(again.path, 'status', '--porcelain'), '');
      assert.equal(await readFile(path.join(again.path, 'src', 'a.ts'), 'utf8'), 'changed by the run\n');
      const repairs = [...fresh.repairs, ...again.repairs];
      assert.ok(
        repairs.some((line) => line.includes(id)),
        `the repair of ${id} is reported: ${JSON.stringify(repairs)}`,
      );

      assert.deepEqual(await snapshot(healthy), healthyBefore, 'the healthy worktree of another run is untouched');
      await git(repo, 'worktree', 'list', '--porcelain'); // git is healthy on the repository again
      await git(repo, 'worktree', 'add', '-q', '--detach', path.join(base, 'ws', `plain-${id}`), 'main');
    });
  }

  test('a worktree of the repository outside the base, half made, is never touched', async () => {
    const outside = path.join(await mkdtemp(path.join(os.tmpdir(), 'echodo-outside-')), 'theirs');
    await git(repo, 'worktree', 'add', '-q', '--detach', outside, 'main');
    const admin = await adminOf(outside);
    await unlink(path.join(admin, 'HEAD'));
    await make('after-outside');
    assert.ok(existsSync(admin), "the operator's admin folder is left alone");
    assert.ok(existsSync(path.join(outside, '.git')));
  });

  test('the worktree base is made 0700; a symlinked base or workspace folder is refused with a clear message', async () => {
    const root = await mkdtemp(path.join(os.tmpdir(), 'echodo-base-'));
    const fresh = path.join(root, 'new-base');
    await prepareWorktree({
      repoPath: repo,
      worktreeBase: fresh,
      workspaceId: 'ws',
      agentRunId: 'mode-run',
      briefId: 'b',
      baseRef: 'main',
      log,
    });
    assert.equal((await stat(fresh)).mode & 0o777, 0o700);
    assert.equal((await stat(path.join(fresh, 'ws'))).mode & 0o777, 0o700);

    const elsewhere = await mkdtemp(path.join(os.tmpdir(), 'echodo-elsewhere-'));
    const linked = path.join(root, 'linked-base');
    await symlink(elsewhere, linked);
    await assert.rejects(
      prepareWorktree({
        repoPath: repo,
        worktreeBase: linked,
        workspaceId: 'ws',
        agentRunId: 'link-run',
        briefId: 'b',
        baseRef: 'main',
        log,
      }),
      /WORKER_WORKTREE_BASE .*linked-base is a symbolic link/,
    );
    assert.deepEqual(await readdir(elsewhere), [], 'nothing was made through the link');

    await symlink(elsewhere, path.join(fresh, 'planted'));
    await assert.rejects(
      prepareWorktree({
        repoPath: repo,
        worktreeBase: fresh,
        workspaceId: 'planted',
        agentRunId: 'planted-run',
        briefId: 'b',
        baseRef: 'main',
        log,
      }),
      /planted is a symbolic link/,
    );
    assert.deepEqual(await readdir(elsewhere), []);
  });
});

describe('the per-repository lock', () => {
  test('a dead holder is taken over at once; a paused one once it stops refreshing; a live one is waited for', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'echodo-lock-'));
    const lock = path.join(dir, 'x.lock');

    // Dead: a pid that has exited.
    const dead = spawn(process.execPath, ['-e', '0']);
    await new Promise((r) => dead.on('exit', r));
    await writeFile(lock, `${dead.pid} someone`);
    let t0 = Date.now();
    await withFileLock(lock, async () => {}, { staleMs: 60_000 });
    assert.ok(Date.now() - t0 < 2_000, 'dead holder taken over at once');

    // Paused: a live pid (SIGSTOPped) whose lock stopped being refreshed.
    const paused = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 60000)']);
    try {
      paused.kill('SIGSTOP');
      await writeFile(lock, `${paused.pid} paused`);
      const old = new Date(Date.now() - 5_000);
      await utimes(lock, old, old);
      t0 = Date.now();
      await withFileLock(lock, async () => {}, { staleMs: 1_000 });
      assert.ok(Date.now() - t0 < 2_000, 'paused holder taken over');
    } finally {
      paused.kill('SIGKILL');
    }

    // Live: a holder that keeps refreshing is waited for, however long it holds (> staleMs).
    const order: string[] = [];
    let release!: () => void;
    const holding = withFileLock(
      lock,
      () =>
        new Promise<void>(
          (r) =>
            (release = () => {
              order.push('first done');
              r();
            }),
        ),
      { staleMs: 300 },
    );
    await new Promise((r) => setTimeout(r, 50));
    const waiting = withFileLock(lock, async () => void order.push('second'), { staleMs: 300 });
    await new Promise((r) => setTimeout(r, 1_200)); // four stale periods
    release();
    await Promise.all([holding, waiting]);
    assert.deepEqual(order, ['first done', 'second']);
    assert.ok(!existsSync(lock), 'released');
  });

  test('many waiters on a lock left by a dead holder: exactly one holds it at a time', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'echodo-lock-'));
    const lock = path.join(dir, 'x.lock');
    const dead = spawn(process.execPath, ['-e', '0']);
    await new Promise((r) => dead.on('exit', r));
    // Unserialized takeovers let two waiters hold it: 115 times in these 300 rounds, before the fix.
    let inside = 0;
    let most = 0;
    let entered = 0;
    for (let round = 0; round < 300; round++) {
      await writeFile(lock, `${dead.pid} gone`);
      const holder = async () => {
        inside++;
        entered++;
        most = Math.max(most, inside);
        await new Promise((r) => setImmediate(r)); // give the other waiters' file operations a turn
        inside--;
      };
      await Promise.all(Array.from({ length: 8 }, () => withFileLock(lock, holder, { staleMs: 60_000 })));
    }
    assert.equal(entered, 300 * 8);
    assert.equal(most, 1, 'at most one holder at a time');
    assert.ok(!existsSync(lock) && !existsSync(`${lock}.takeover`), 'both lock files released');
  });
});

// Real worker processes from here on.
const ROUNDS = 3;
const SLOW_LEASE = { WORKER_LEASE_MS: '6000', WORKER_HEARTBEAT_MS: '300' };
let s: Scenario;
let baselineTree: string;
const workers: Child[] = [];
const spawnWorker = (env: Record<string, string> = {}) => {
  const w = s.spawnWorker(env);
  workers.push(w);
  // Streamed to a file as it comes, for a post-mortem of a hung or failed run.
  const out = process.env.ECHODO_TEST_OUTPUT;
  if (out) {
    const file = createWriteStream(path.join(out, 'worktree-crash-workers.log'), { flags: 'a' });
    const tag = `[w${workers.length - 1} ${w.pid}${env.ECHODO_FAULT ? ` ${env.ECHODO_FAULT}` : ''}] `;
    for (const stream of [w.process.stdout!, w.process.stderr!])
      stream.on('data', (d: string | Buffer) => file.write(String(d).replace(/^(?=.)/gm, tag)));
    void w.exited.then(() => file.end());
  }
  return w;
};
const finishAll = (ids: string[]) => finishAllRuns(s, spawnWorker, ids, { finishers: 2 });
const workerErrors = (agentRunId: string) =>
  workers
    .flatMap((w) => w.lines)
    .filter((l) => l.includes(agentRunId) && /"level":[45]0/.test(l))
    .join('\n')
    .slice(0, 2000);
const assertCompleted = (agentRunId: string) =>
  assertCompletedLike(s, agentRunId, baselineTree, workerErrors(agentRunId));

before(async () => {
  if (process.env.ECHODO_TEST_OUTPUT)
    await rm(path.join(process.env.ECHODO_TEST_OUTPUT, 'worktree-crash-workers.log'), { force: true });
  const base = path.join(await mkdtemp(path.join(os.tmpdir(), 'echodo-wtcrash-e2e-')), 'worktrees');
  // Leases long enough that a loaded machine's late heartbeat is not taken for a stall.
  s = await createScenario({ steps: sampleSteps(10, ROUNDS), env: { WORKER_WORKTREE_BASE: base, ...SLOW_LEASE } });
});

after(async () => {
  await Promise.all(workers.map((w) => w.stop('SIGKILL', 100)));

  await s?.close();
});

describe('half-made worktrees of killed runs (real workers)', () => {
  test(
    'each state next to a healthy worktree: a new run completes, the damaged runs resume and complete, the healthy one is untouched',
    { timeout: 600_000 },
    async () => {
      const { agentRunId: healthyId } = await s.dispatch();
      const first = spawnWorker();
      await s.waitForStatus(healthyId, 'completed', 120_000);
      await first.stop('SIGTERM');
      baselineTree = await s.branchTree(healthyId);
      const healthyPath = (await s.run(healthyId)).worktree_path as string;

      // One victim per state, each killed after its second checkpoint.
      const names = Object.keys(STATES);
      const victims: string[] = [];
      for (const _ of names) victims.push((await s.dispatch()).agentRunId);
      const faulty = names.map(() => spawnWorker({ ECHODO_FAULT: 'after-checkpoint-row@2' }));
      // Killed at the point, or (a loaded machine's late heartbeat) stopped by its own lease check
      // first: either way the run is left for the stall detector with its worktree recorded.
      for (const exit of await Promise.all(faulty.map((w) => w.exited)))
        assert.ok(exit.signal === 'SIGKILL' || exit.code === 3, JSON.stringify(exit));

      const healthyBefore = await snapshot(healthyPath);
      for (const [i, name] of names.entries()) {
        const wt = (await s.run(victims[i]!)).worktree_path as string;
        assert.ok(wt, `victim ${i} recorded its worktree`);
        await STATES[name]!(wt, await adminOf(wt));
      }

      const { agentRunId: newId } = await s.dispatch();
      await finishAll([...victims, newId]);

      await assertCompleted(newId);
      for (const [i, id] of victims.entries()) {
        await assertCompleted(id);
        const resumed = (await s.events(id, 'run_resumed')).at(-1)!;
        const said = JSON.stringify(resumed.metadata);
        assert.match(
          said,
          /worktree re-added with git worktree add .* at checkpoint commit/,
          `${names[i]}: run_resumed lists the re-add: ${said}`,
        );
        // Its own resume repaired it, or a run that made its worktree first did (then it was missing).
        assert.match(said, /half.made|worktree_missing/, `${names[i]}: run_resumed names what it found: ${said}`);
      }
      assert.deepEqual(await snapshot(healthyPath), healthyBefore, 'the healthy worktree of another run is untouched');
    },
  );
});

describe('SIGKILL at the worktree fault points', () => {
  const points = ['after-worktree-admin', 'after-worktree-checkout', 'before-branch-recorded'];
  test(
    `each of ${points.join(', ')}: the killed run resumes and a new run completes`,
    { timeout: 600_000 },
    async () => {
      const killed: string[] = [];
      for (const _ of points) killed.push((await s.dispatch()).agentRunId);
      const faulty = points.map((point) => spawnWorker({ ECHODO_FAULT: point }));
      const exits = await Promise.all(faulty.map((w) => w.exited));
      for (const [i, exit] of exits.entries()) {
        assert.equal(
          exit.signal,
          'SIGKILL',
          `worker with ${points[i]} killed at its point: ${faulty[i]!.output().slice(-1500)}`,
        );
        assert.ok(faulty[i]!.lines.some((l) => l.includes(`fault point ${points[i]} reached`)));
      }
      const fresh: string[] = [];
      for (const _ of points) fresh.push((await s.dispatch()).agentRunId);
      await finishAll([...killed, ...fresh]);
      for (const id of [...killed, ...fresh]) await assertCompleted(id);
      for (const id of killed) assert.ok((await s.run(id)).attempt >= 2, 'the killed run was resumed');
      await git(s.repo, 'worktree', 'list', '--porcelain');
    },
  );
});
