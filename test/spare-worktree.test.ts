// Warm spare worktrees (worker/worktrees/spares.ts): a host keeps one checked-out worktree of its
// repository; a run that needs a new worktree takes it (rename, HEAD on the run's branch, a two-way read-tree
// that rewrites only the files that differ) instead of `git worktree add` + a full checkout.
// Real git, real processes: concurrent takers are separate processes, kills are SIGKILLs at the
// named fault points, and the cross-host resume runs real workers against a `git daemon` remote.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm, stat, utimes, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { after, before, describe, test } from 'node:test';
import { changedPathsByGit } from '../worker/checkpoints/content.ts';
import { createLogger } from '../worker/log.ts';
import { makeSpareWorktree } from '../worker/worktrees/spare-keeper.ts';
import { AIM_HOLD_MS, spareFolderFor } from '../worker/worktrees/spares.ts';
import { pointerOf } from '../worker/worktrees/repair.ts';
import { prepareWorktree, repoCommonDir } from '../worker/worktrees/worktree.ts';
import { spawnNode, waitFor, type Child } from './support/child.ts';
import { git, makeRepo } from './support/git.ts';
import { assertFinishedOnRemote, moveOn, setUpHosts, stopProcesses, type Hosts } from './support/hosts.ts';
import { createScenario, sampleSteps, type Scenario } from './support/scenario.ts';

const log = createLogger({ level: 'silent' });
const scratch: string[] = [];

async function tempDir(prefix: string): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), prefix));
  scratch.push(dir);
  return dir;
}

/** A repository of 30 folders × 20 files, on main. */
async function bigRepo(): Promise<string> {
  const files: Record<string, string> = {};
  for (let d = 0; d < 30; d++) for (let f = 0; f < 20; f++) files[`d${d}/f${f}.txt`] = `file ${d}/${f}\n`;
  const repo = await makeRepo(files);
  scratch.push(repo);
  return repo;
}

async function commitChange(repo: string, file: string, content: string): Promise<string> {
  await writeFile(path.join(repo, file), content);
  await git(repo, 'commit', '-qam', `change ${file}`);
  return git(repo, 'rev-parse', 'HEAD');
}

const spares = async (base: string, repo: string) =>
  readdir(spareFolderFor(base, await repoCommonDir(repo))).catch(() => [] as string[]);

/** Every registered worktree's admin folder is complete and its folder exists: nothing dead left. */
async function assertNoDeadWorktrees(repo: string): Promise<void> {
  const porcelain = await git(repo, 'worktree', 'list', '--porcelain');
  assert.doesNotMatch(porcelain, /prunable/, `no prunable worktree: ${porcelain}`);
  for (const name of await readdir(path.join(repo, '.git', 'worktrees')).catch(() => [] as string[])) {
    const admin = path.join(repo, '.git', 'worktrees', name);
    assert.ok((await readFile(path.join(admin, 'HEAD'), 'utf8')).trim(), `${name}: HEAD`);
    const gitdir = (await readFile(path.join(admin, 'gitdir'), 'utf8')).trim();
    assert.ok(existsSync(gitdir), `${name}: its worktree ${gitdir} exists`);
  }
}

/** What a made worktree must look like, whichever way it was made. */
async function shapeOf(wt: string) {
  const root = await stat(wt);
  const file = await stat(path.join(wt, 'd1', 'f1.txt'));
  return {
    rootMode: root.mode & 0o7777,
    rootUid: root.uid,
    fileMode: file.mode & 0o7777,
    fileUid: file.uid,
    dirMode: (await stat(path.join(wt, 'd1'))).mode & 0o7777,
    entries: (await readdir(wt)).sort(),
    status: await git(wt, 'status', '--porcelain', '--ignored', '--untracked-files=all'),
  };
}

/** A child process that runs `body` (TypeScript, top-level await) with the worktree modules imported. */
async function childScript(body: string): Promise<string> {
  const dir = await tempDir('echodo-spare-child-');
  const file = path.join(dir, 'child.mts');
  const url = (p: string) => JSON.stringify(pathToFileURL(path.resolve(p)).href);
  await writeFile(
    file,
    `import { prepareWorktree } from ${url('worker/worktrees/worktree.ts')};\n` +
      `import { makeSpareWorktree } from ${url('worker/worktrees/spare-keeper.ts')};\n` +
      `import { createLogger } from ${url('worker/log.ts')};\n` +
      `const log = createLogger({ level: 'silent' });\n` +
      `const [repo, base, id] = process.argv.slice(2);\n` +
      body,
  );
  return file;
}

describe('a spare worktree, in process and in child processes', () => {
  let repo: string;
  let base: string;
  const make = (id: string, extra: Record<string, unknown> = {}) =>
    prepareWorktree({
      repoPath: repo,
      worktreeBase: base,
      workspaceId: 'ws',
      agentRunId: id,
      briefId: `b-${id}`,
      baseRef: 'main',
      log,
      ...extra,
    });

  before(async () => {
    repo = await bigRepo();
    base = path.join(await tempDir('echodo-spare-'), 'base');
  });

  after(async () => {
    await Promise.all(scratch.map((d) => rm(d, { recursive: true, force: true })));
  });

  test('a fresh run takes the spare: same shape as an added worktree, only tracked files, only differing files rewritten', async () => {
    // The reference: a worktree made the old way, with no spare on the host.
    const added = await make('added-run');
    assert.equal(added.created, true);
    assert.equal(added.fromSpare, false);

    const oldHead = await git(repo, 'rev-parse', 'HEAD');
    const made = await makeSpareWorktree({ repoPath: repo, worktreeBase: base, log });
    assert.equal(made.action, 'made');
    assert.deepEqual(await spares(base, repo), [path.basename(made.path!)]);
    assert.equal(
      (await makeSpareWorktree({ repoPath: repo, worktreeBase: base, log })).action,
      'ready',
      'one spare per repository',
    );
    const untouchedBefore = await stat(path.join(made.path!, 'd2', 'f3.txt'));
    const changedBefore = await stat(path.join(made.path!, 'd1', 'f1.txt'));
    // The repository moves on after the spare was made: the run starts one commit later.
    const newHead = await commitChange(repo, 'd1/f1.txt', 'changed on main\n');
    assert.notEqual(newHead, oldHead);

    const wt = await make('spare-run');
    assert.equal(wt.created, true);
    assert.equal(wt.fromSpare, true);
    assert.equal(wt.headOid, newHead);
    assert.deepEqual(await spares(base, repo), [], 'the spare was taken');
    assert.equal(await git(wt.path, 'rev-parse', '--abbrev-ref', 'HEAD'), wt.branch);
    assert.equal(await git(wt.path, 'rev-parse', 'HEAD'), newHead);
    assert.equal(await readFile(path.join(wt.path, 'd1', 'f1.txt'), 'utf8'), 'changed on main\n');
    assert.equal(
      await git(wt.path, 'rev-parse', '--path-format=absolute', '--git-common-dir'),
      path.join(repo, '.git'),
    );

    // Only the differing file was written: an untouched one keeps its inode and mtime.
    const untouched = await stat(path.join(wt.path, 'd2', 'f3.txt'));
    assert.equal(untouched.ino, untouchedBefore.ino);
    assert.equal(untouched.mtimeMs, untouchedBefore.mtimeMs);
    const changed = await stat(path.join(wt.path, 'd1', 'f1.txt'));
    assert.ok(
      changed.ino !== changedBefore.ino || changed.mtimeMs !== changedBefore.mtimeMs,
      'the differing file was rewritten',
    );

    // Exactly the ownership, permissions and content of a freshly added worktree; nothing untracked.
    const reference = await make('added-again');
    assert.equal(reference.fromSpare, false, 'no spare left to take');
    assert.deepEqual(await shapeOf(wt.path), await shapeOf(reference.path));
    assert.equal(await git(wt.path, 'ls-files', '-s'), await git(reference.path, 'ls-files', '-s'));
    // The index settings addWorktree sets: split index, untracked cache recorded for the run's path.
    const admin = (await readFile(path.join(wt.path, '.git'), 'utf8')).trim().replace(/^gitdir:\s*/, '');
    const index = await readFile(path.join(admin, 'index'));
    assert.ok(index.includes('link'), 'split index');
    assert.ok(index.includes(`Location ${wt.path},`), "untracked cache recorded at the run's path");
    assert.equal((await readFile(path.join(admin, 'gitdir'), 'utf8')).trim(), path.join(wt.path, '.git'));
    await assertNoDeadWorktrees(repo);
    // Reused as any worktree afterwards (no second creation).
    assert.equal((await make('spare-run')).created, false);
  });

  test('a spare far behind the repository still works; making one refreshes it', async () => {
    await makeSpareWorktree({ repoPath: repo, worktreeBase: base, log });
    for (let i = 0; i < 30; i++) await commitChange(repo, `d${i}/f${i % 20}.txt`, `moved on ${i}\n`);
    await rm(path.join(repo, 'd5'), { recursive: true });
    await git(repo, 'commit', '-qam', 'remove d5');
    const head = await git(repo, 'rev-parse', 'HEAD');
    const wt = await make('behind-run');
    assert.equal(wt.fromSpare, true);
    assert.equal(await git(wt.path, 'rev-parse', 'HEAD^{tree}'), await git(repo, 'rev-parse', `${head}^{tree}`));
    assert.equal(await git(wt.path, 'status', '--porcelain', '--ignored', '--untracked-files=all'), '');
    assert.equal(existsSync(path.join(wt.path, 'd5')), false, 'a folder the target lacks is gone');

    const spare = await makeSpareWorktree({ repoPath: repo, worktreeBase: base, log });
    assert.equal(spare.action, 'made');
    await commitChange(repo, 'd7/f7.txt', 'later\n');
    const refreshed = await makeSpareWorktree({ repoPath: repo, worktreeBase: base, log });
    assert.equal(refreshed.action, 'refreshed');
    assert.equal(refreshed.path, spare.path);
    assert.equal(await git(spare.path!, 'rev-parse', 'HEAD'), await git(repo, 'rev-parse', 'HEAD'));
    assert.equal(await git(spare.path!, 'status', '--porcelain', '--ignored', '--untracked-files=all'), '');
  });

  test('resume-style: checked out at a given commit, the branch created at its base when missing', async () => {
    await makeSpareWorktree({ repoPath: repo, worktreeBase: base, log });
    const baseOid = await git(repo, 'rev-parse', 'HEAD~3');
    const checkout = await git(repo, 'rev-parse', 'HEAD~1');
    const wt = await make('resume-run', { knownBaseOid: baseOid, checkoutOid: checkout });
    assert.equal(wt.fromSpare, true);
    assert.equal(wt.headOid, checkout);
    assert.equal(await git(wt.path, 'rev-parse', 'HEAD'), checkout);
    assert.match(
      await git(repo, 'reflog', 'show', '--format=%gs', `refs/heads/${wt.branch}`),
      new RegExp(`branch: Created from ${baseOid}`),
    );
  });

  test('aimed by the remote standby: the take writes no file; the keeper leaves it; let go, it is back at HEAD', async () => {
    const mainHead = await git(repo, 'rev-parse', 'HEAD');
    // A checkpoint of another run: a commit off main that changes one file.
    await git(repo, 'switch', '-q', '-c', 'aim-source');
    const target = await commitChange(repo, 'd3/f3.txt', 'checkpointed elsewhere\n');
    await git(repo, 'switch', '-q', 'main');
    const aimed = await makeSpareWorktree({ repoPath: repo, worktreeBase: base, aim: target, log });
    assert.equal(await git(aimed.path!, 'rev-parse', 'HEAD'), target);
    assert.equal(await git(aimed.path!, 'status', '--porcelain', '--ignored', '--untracked-files=all'), '');
    const kept = await makeSpareWorktree({ repoPath: repo, worktreeBase: base, log });
    assert.deepEqual(
      [kept.action, await git(aimed.path!, 'rev-parse', 'HEAD')],
      ['ready', target],
      'the keeper leaves an aimed spare',
    );

    const prior = await stat(path.join(aimed.path!, 'd3', 'f3.txt'));
    const wt = await make('aimed-run', { knownBaseOid: mainHead, checkoutOid: target });
    assert.deepEqual([wt.fromSpare, wt.spareAimed, wt.headOid], [true, true, target]);
    const taken = await stat(path.join(wt.path, 'd3', 'f3.txt'));
    assert.deepEqual(
      [taken.ino, taken.mtimeMs],
      [prior.ino, prior.mtimeMs],
      'not even the file the checkpoint changed was written',
    );
    assert.equal(await readFile(path.join(wt.path, 'd3', 'f3.txt'), 'utf8'), 'checkpointed elsewhere\n');
    assert.equal(await git(wt.path, 'rev-parse', '--abbrev-ref', 'HEAD'), wt.branch);
    assert.equal(await git(wt.path, 'status', '--porcelain', '--ignored', '--untracked-files=all'), '');
    // No git ran in it: its untracked cache is still keyed to the spare's path, until the first
    // status after a command makes it anew for the run's.
    const admin = (await readFile(path.join(wt.path, '.git'), 'utf8')).trim().replace(/^gitdir:\s*/, '');
    const keyedTo = async () =>
      /Location ([^,]*),/.exec((await readFile(path.join(admin, 'index'))).toString('latin1'))?.[1];
    assert.equal(await keyedTo(), aimed.path);
    assert.deepEqual(await changedPathsByGit(wt.path), []);
    assert.equal(await keyedTo(), wt.path, "untracked cache made anew at the run's path");
    assert.equal(existsSync(path.join(admin, 'echodo-aimed')), false, "the run's admin folder carries no aim");

    // A run of another workspace that takes an aimed spare keeps nothing of the aimed run.
    await makeSpareWorktree({ repoPath: repo, worktreeBase: base, aim: target, log });
    const other = await prepareWorktree({
      repoPath: repo,
      worktreeBase: base,
      workspaceId: 'ws-other',
      agentRunId: 'fresh',
      briefId: 'b-fresh',
      baseRef: 'main',
      log,
    });
    assert.deepEqual([other.fromSpare, other.spareAimed], [true, false]);
    assert.equal(await git(other.path, 'rev-parse', 'HEAD^{tree}'), await git(repo, 'rev-parse', 'main^{tree}'));
    assert.equal(
      await readFile(path.join(other.path, 'd3', 'f3.txt'), 'utf8'),
      await readFile(path.join(repo, 'd3', 'f3.txt'), 'utf8'),
    );
    assert.equal(await git(other.path, 'status', '--porcelain', '--ignored', '--untracked-files=all'), '');

    // Aimed again. The run no longer looks abandoned (just claimed: maybe here, about to take the
    // spare), so for AIM_HOLD_MS the spare is neither let go nor aimed elsewhere...
    const again = await makeSpareWorktree({ repoPath: repo, worktreeBase: base, aim: target, log });
    for (const aim of [null, mainHead]) {
      const held = await makeSpareWorktree({ repoPath: repo, worktreeBase: base, aim, log });
      assert.deepEqual(
        [held.action, await git(again.path!, 'rev-parse', 'HEAD')],
        ['ready', target],
        `held against ${aim}`,
      );
    }
    // ...then it is let go: back at the repository's HEAD, and the keeper's again.
    const mark = path.join(pointerOf(again.path!)!, 'echodo-aimed');
    const stale = new Date(Date.now() - AIM_HOLD_MS - 1000);
    await utimes(mark, stale, stale);
    const back = await makeSpareWorktree({ repoPath: repo, worktreeBase: base, aim: null, log });
    assert.deepEqual([back.action, await git(back.path!, 'rev-parse', 'HEAD')], ['refreshed', mainHead]);
    assert.equal(existsSync(mark), false);
    await commitChange(repo, 'd4/f4.txt', 'main moves on\n');
    assert.equal(
      (await makeSpareWorktree({ repoPath: repo, worktreeBase: base, aim: null, log })).action,
      'ready',
      "an unaimed spare is the keeper's",
    );
    assert.equal(await git(back.path!, 'status', '--porcelain', '--ignored', '--untracked-files=all'), '');
    await assertNoDeadWorktrees(repo);
  });

  test('two processes take at once: exactly one gets the spare, both get working worktrees', async () => {
    await makeSpareWorktree({ repoPath: repo, worktreeBase: base, log });
    const script = await childScript(
      `const wt = await prepareWorktree({ repoPath: repo, worktreeBase: base, workspaceId: 'ws', agentRunId: id, briefId: 'b-' + id, baseRef: 'main', log });\n` +
        `console.log('RESULT ' + JSON.stringify({ fromSpare: wt.fromSpare, path: wt.path }));\n`,
    );
    for (let round = 0; round < 3; round++) {
      if (round) await makeSpareWorktree({ repoPath: repo, worktreeBase: base, log });
      const ids = [`race-${round}-a`, `race-${round}-b`, `race-${round}-c`];
      const children = ids.map((id) => spawnNode(script, [repo, base, id]));
      const results = await Promise.all(
        children.map(async (c) => {
          const exit = await c.exited;
          assert.equal(exit.code, 0, c.output());
          return JSON.parse(c.lines.find((l) => l.startsWith('RESULT '))!.slice(7)) as {
            fromSpare: boolean;
            path: string;
          };
        }),
      );
      assert.equal(results.filter((r) => r.fromSpare).length, 1, `one taker got the spare: ${JSON.stringify(results)}`);
      const head = await git(repo, 'rev-parse', 'HEAD');
      for (const r of results) {
        assert.equal(await git(r.path, 'rev-parse', 'HEAD'), head);
        assert.equal(await git(r.path, 'status', '--porcelain', '--ignored', '--untracked-files=all'), '');
      }
      const admins = await Promise.all(
        results.map(async (r) => (await readFile(path.join(r.path, '.git'), 'utf8')).trim()),
      );
      assert.equal(new Set(admins).size, 3, 'three distinct admin folders');
    }
    await assertNoDeadWorktrees(repo);
  });

  for (const point of ['after-spare-move', 'after-worktree-admin', 'after-worktree-checkout']) {
    test(`SIGKILL while taking the spare (${point}): the run's worktree is made again, the next spare and run work`, async () => {
      await makeSpareWorktree({ repoPath: repo, worktreeBase: base, log });
      const script = await childScript(
        `await prepareWorktree({ repoPath: repo, worktreeBase: base, workspaceId: 'ws', agentRunId: id, briefId: 'b-' + id, baseRef: 'main', log });\n` +
          `console.log('prepared');\n`,
      );
      const id = `killed-${point}`;
      const child = spawnNode(script, [repo, base, id], { env: { ECHODO_FAULT: point } });
      assert.equal((await child.exited).signal, 'SIGKILL', child.output());
      assert.match(child.output(), new RegExp(`fault point ${point} reached`));
      // The same run again (as its resume or retry does), then a new spare and a new run.
      const again = await make(id);
      const head = await git(repo, 'rev-parse', 'HEAD');
      assert.equal(await git(again.path, 'rev-parse', 'HEAD'), head);
      assert.equal(await git(again.path, 'rev-parse', '--abbrev-ref', 'HEAD'), again.branch);
      assert.equal(await git(again.path, 'status', '--porcelain', '--ignored', '--untracked-files=all'), '');
      if (point === 'after-worktree-checkout')
        assert.equal(again.created, false, 'complete when killed after its index: reused');
      else
        assert.ok(
          again.created && again.repairs.length > 0,
          `half made: removed and made again: ${JSON.stringify(again.repairs)}`,
        );
      assert.equal((await makeSpareWorktree({ repoPath: repo, worktreeBase: base, log })).action, 'made');
      const next = await make(`after-${id}`);
      assert.equal(next.fromSpare, true);
      assert.equal(await git(next.path, 'status', '--porcelain', '--ignored', '--untracked-files=all'), '');
      await assertNoDeadWorktrees(repo);
    });
  }

  for (const point of ['after-spare-admin', 'after-spare-checkout']) {
    test(`SIGKILL while making the spare (${point}): the next spare and run work, nothing dead is left`, async () => {
      // No spare on the host before: the killed process makes one.
      while ((await spares(base, repo)).length) await make(`drain-${point}-${Date.now()}`);
      const script = await childScript(
        `await makeSpareWorktree({ repoPath: repo, worktreeBase: base, log });\nconsole.log('made');\n`,
      );
      const child = spawnNode(script, [repo, base, 'x'], { env: { ECHODO_FAULT: point } });
      assert.equal((await child.exited).signal, 'SIGKILL', child.output());
      const made = await makeSpareWorktree({ repoPath: repo, worktreeBase: base, log });
      // Killed after its checkout, the spare was complete: kept. Before, it was half made: made again.
      assert.equal(made.action, point === 'after-spare-checkout' ? 'ready' : 'made', JSON.stringify(made));
      if (point === 'after-spare-admin')
        assert.ok(
          made.repairs.some((r) => r.includes('half made')),
          JSON.stringify(made.repairs),
        );
      assert.equal((await spares(base, repo)).length, 1);
      const wt = await make(`after-make-${point}`);
      assert.equal(wt.fromSpare, true);
      assert.equal(await git(wt.path, 'status', '--porcelain', '--ignored', '--untracked-files=all'), '');
      await assertNoDeadWorktrees(repo);
    });
  }
});

/** Whole seconds, as git compares them: the newest mtime of the worktree's tracked files, and its index's. */
async function indexAndNewestFile(dir: string): Promise<{ index: number; newestFile: number }> {
  const seconds = async (file: string) => Math.floor((await stat(file)).mtimeMs / 1000);
  const index = await git(dir, 'rev-parse', '--path-format=absolute', '--git-path', 'index');
  let newestFile = 0;
  for (const file of (await git(dir, 'ls-files', '-z')).split('\0').filter(Boolean)) {
    newestFile = Math.max(newestFile, await seconds(path.join(dir, file)));
  }
  return { index: await seconds(index), newestFile };
}

test('a spare made or refreshed has no racily clean entry: its index is written in a later second than its files', async () => {
  // Else the take's read-tree re-reads and hashes every racily clean file (all of them, for a
  // spare just checked out): at 10k files a take cost 118 ms instead of 28.
  const repo = await bigRepo();
  const base = await tempDir('spare-racy-');
  const made = await makeSpareWorktree({ repoPath: repo, worktreeBase: base, log });
  assert.equal(made.action, 'made');
  const afterMade = await indexAndNewestFile(made.path!);
  assert.ok(
    afterMade.index > afterMade.newestFile,
    `made: index written at second ${afterMade.index}, newest file at ${afterMade.newestFile}`,
  );
  await commitChange(repo, 'd4/f4.txt', 'moved on\n');
  const refreshed = await makeSpareWorktree({ repoPath: repo, worktreeBase: base, log });
  assert.equal(refreshed.action, 'refreshed');
  const afterRefresh = await indexAndNewestFile(refreshed.path!);
  assert.ok(
    afterRefresh.index > afterRefresh.newestFile,
    `refreshed: index at second ${afterRefresh.index}, newest file at ${afterRefresh.newestFile}`,
  );
  assert.equal(await git(refreshed.path!, 'status', '--porcelain', '--ignored', '--untracked-files=all'), '');
});

describe("real workers: a fresh run and a cross-host resume take the host's spare", () => {
  const ROUNDS = 5;
  let s: Scenario;
  let hosts: Hosts;
  let baselineTree: string;
  const children: Child[] = [];
  const spawnOn = (name: string, extra: Record<string, string> = {}) => {
    const w = s.spawnWorker({ ...hosts.byName[name]!.env, ...extra });
    children.push(w);
    return w;
  };
  const dispatch = () => s.dispatch({ repoPath: undefined });

  before(async () => {
    s = await createScenario({
      steps: sampleSteps(40, ROUNDS),
      env: { WORKER_LEASE_MS: '8000', WORKER_HEARTBEAT_MS: '500' },
    });
    hosts = await setUpHosts(s, ['a', 'b']);
    await moveOn(hosts, hosts.byName.a!.repo, 20); // host B's clone is behind
  });

  after(async () => {
    await stopProcesses(children);
    await hosts?.close();
    await s?.close();
  });

  test('a fresh run on host A takes the spare its worker made at start', { timeout: 300_000 }, async () => {
    const w = spawnOn('a');
    await w.waitForLine(/"spare worktree ready"/, { timeoutMs: 120_000 });
    const { agentRunId } = await dispatch();
    await s.waitForStatus(agentRunId, 'completed', 180_000);
    baselineTree = await git(
      hosts.byName.a!.repo,
      'rev-parse',
      `refs/heads/${(await s.run(agentRunId)).branch}^{tree}`,
    );
    assert.ok(
      w.lines.some((l) => l.includes('"spare worktree taken"') && l.includes(agentRunId)),
      'the run took the spare',
    );
    assert.equal((await s.events(agentRunId, 'worktree_created')).length, 1);
    await assertFinishedOnRemote(s, hosts, agentRunId, ROUNDS, baselineTree);
    // Made again in the background after it was taken.
    await waitFor(
      () =>
        w.lines.filter((l) => l.includes('"spare worktree ready"') && l.includes('"action":"made"')).length >= 2 ||
        undefined,
      { timeoutMs: 60_000, what: 'the spare made again' },
    );
    await w.stop('SIGTERM', 8000);
  });

  test(
    'host A killed mid-brief; host B resumes into its spare: checkpoint tree, integrity intact',
    { timeout: 300_000 },
    async () => {
      const { agentRunId } = await dispatch();
      // Before the 4th round's tool: checkpoints 1-3 have counted (with the remote, the last behind the model call).
      const victim = spawnOn('a', {
        ECHODO_FAULT: 'before-tool-call@4',
        WORKER_LEASE_MS: '3000',
        WORKER_HEARTBEAT_MS: '300',
      });
      assert.equal((await victim.exited).signal, 'SIGKILL');
      const rows = await s.checkpoints(agentRunId);
      assert.equal(rows.length, 3);
      // Host B has been up: its spare is ready before the run is handed on.
      const b = spawnOn('b');
      await b.waitForLine(/"spare worktree ready"/, { timeoutMs: 120_000 });
      const resumedLine = b.waitForLine(/"worktree verified against Postgres and the git notes"/, {
        timeoutMs: 180_000,
      });
      const deadline = Date.now() + 180_000;
      while ((await s.run(agentRunId)).status !== 'completed') {
        assert.ok(Date.now() < deadline, `run not completed: ${b.lines.slice(-20).join('\n')}`);
        await s.sweep();
        await new Promise((r) => setTimeout(r, 200));
      }
      await resumedLine;
      const [resumed] = await s.events(agentRunId, 'run_resumed');
      assert.equal(resumed?.metadata.fromHost, 'host-a');
      assert.equal(resumed?.metadata.toHost, 'host-b');
      assert.equal(resumed?.metadata.recloned, false);
      assert.equal(resumed?.metadata.fromSeq, 3);
      assert.match(JSON.stringify(resumed?.metadata.repairs), /spare worktree, made with git worktree add, taken/);
      const taken = b.lines.find((l) => l.includes('"spare worktree taken"'));
      assert.ok(taken, 'host B took its spare');
      // Brought to the checkpoint commit itself (the tree the row and note record).
      assert.equal(JSON.parse(taken).to, rows.at(-1)!.commit_oid);
      const host = await assertFinishedOnRemote(s, hosts, agentRunId, ROUNDS, baselineTree);
      assert.equal(host.id, 'host-b');
      await b.stop('SIGTERM', 8000);
    },
  );
});
