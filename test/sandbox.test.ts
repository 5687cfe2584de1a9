// The sandbox at the tool level, with real bwrap and a real worktree made by `git worktree add`:
// the allowlisted git commands still work (the common git dir read-only, the worktree's admin dir
// writable), a repository script sees no git dir and cannot repoint the .git file, files it writes
// belong to the worker outside, and an unusable sandbox refuses run_command with its reason.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, realpath, rm, rmdir, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { after, before, describe, test } from 'node:test';
import { ToolRefusedError } from '../core/errors.ts';
import { bwrapArgs } from '../worker/sandbox/bwrap.ts';
import { gitLayout } from '../worker/sandbox/git-dirs.ts';
import { describeSandbox, probeSandbox, type CommandSandbox } from '../worker/sandbox/index.ts';
import type { ToolContext } from '../worker/tools/context.ts';
import { runCommand } from '../worker/tools/run-command.ts';
import { spawnNode, waitFor } from './support/child.ts';
import { git, makeRepo } from './support/git.ts';

let repo: string;
let worktree: string;
let sandbox: CommandSandbox;
const scratch: string[] = [];

function ctx(root: string, overrides: Partial<ToolContext> = {}): ToolContext {
  return {
    root,
    writePrefixes: null,
    allowedCommands: ['git status', 'git diff', 'npm test'],
    commandTimeoutMs: 20_000,
    sandbox,
    beforeTouch: async () => {},
    onTouched: () => {},
    ...overrides,
  };
}

async function refused(promise: Promise<unknown>, pattern: RegExp): Promise<void> {
  await assert.rejects(promise, (err: unknown) => {
    assert.ok(err instanceof ToolRefusedError, `expected ToolRefusedError, got ${String(err)}`);
    assert.match(err.message, pattern);
    return true;
  });
}

before(async () => {
  sandbox = await probeSandbox({ mode: 'bwrap' });
  assert.ok(sandbox.mode === 'bwrap' && sandbox.usable, `bwrap is usable here: ${describeSandbox(sandbox)}`);
  repo = await makeRepo({
    'a.txt': 'one\n',
    'package.json': JSON.stringify({ name: 's', version: '1.0.0', scripts: { test: 'sh probe.sh' } }),
    'probe.sh': '',
  });
  const base = await realpath(await mkdtemp(path.join(os.tmpdir(), 'echodo-sandbox-wt-')));
  worktree = path.join(base, 'run-1');
  scratch.push(repo, base);
  // As the worker makes them: a linked worktree with the untracked cache and a split index.
  await git(repo, 'worktree', 'add', '-q', '-b', 'echodo/b-1', worktree, 'main');
  await git(worktree, 'update-index', '--untracked-cache', '--split-index');
});

after(async () => {
  for (const dir of scratch) await rm(dir, { recursive: true, force: true });
});

describe('git commands in the sandbox', () => {
  test('git status and git diff work in a linked worktree', async () => {
    await writeFile(path.join(worktree, 'a.txt'), 'two\n');
    await writeFile(path.join(worktree, 'new.txt'), 'new\n');
    const status = await runCommand(ctx(worktree), { command: 'git status --short' });
    assert.equal(status.exitCode, 0, status.stderr);
    assert.equal(status.stdout, ' M a.txt\n?? new.txt\n');
    const diff = await runCommand(ctx(worktree), { command: 'git diff --stat' });
    assert.equal(diff.exitCode, 0, diff.stderr);
    assert.match(diff.stdout, /a\.txt \| 2 \+-/);
    assert.equal(diff.stderr, '', 'no "dubious ownership" or other complaint');
    assert.match(diff.note!, /ran in the bwrap sandbox/);
  });

  test('git gets the common dir read-only and the worktree admin dir writable', async () => {
    const layout = await gitLayout(worktree);
    assert.equal(layout.kind, 'worktree');
    if (layout.kind !== 'worktree') return;
    assert.equal(layout.commonDir, await realpath(path.join(repo, '.git')));
    const args = bwrapArgs({
      toolchain: sandbox.mode === 'bwrap' && sandbox.usable ? sandbox.toolchain : { mounts: [], path: '' },
      root: worktree,
      access: 'git',
      git: layout,
      argv: ['git', 'status'],
    });
    const joined = args.join(' ');
    assert.ok(joined.includes(`--ro-bind ${layout.commonDir} ${layout.commonDir}`), joined);
    assert.ok(joined.includes(`--bind ${layout.adminDir} ${layout.adminDir}`), joined);
    const scriptArgs = bwrapArgs({
      toolchain: { mounts: [], path: '' },
      root: worktree,
      access: 'script',
      git: layout,
      argv: ['npm', 'test'],
    });
    assert.ok(!scriptArgs.includes(layout.commonDir), 'a script gets no git dir mount');
  });

  test('git runs no repository hooks, fsmonitor or external diff inside', async () => {
    const marker = path.join(worktree, 'fsmonitor-ran');
    await git(repo, 'config', 'core.fsmonitor', `touch ${marker}`);
    await git(repo, 'config', 'diff.external', `touch ${marker}`);
    try {
      const status = await runCommand(ctx(worktree), { command: 'git status --short' });
      const diff = await runCommand(ctx(worktree), { command: 'git diff' });
      assert.equal(status.exitCode, 0, status.stderr);
      assert.equal(diff.exitCode, 0, diff.stderr);
      await assert.rejects(stat(marker), 'neither the fsmonitor nor the external diff ran');
    } finally {
      await git(repo, 'config', '--unset', 'core.fsmonitor');
      await git(repo, 'config', '--unset', 'diff.external');
    }
  });
});

describe('repository scripts in the sandbox', () => {
  test('a script sees no git dir, cannot repoint .git, and its files belong to the worker outside', async () => {
    const commonDir = await realpath(path.join(repo, '.git'));
    const pointer = await readFile(path.join(worktree, '.git'), 'utf8');
    await writeFile(
      path.join(worktree, 'probe.sh'),
      `[ -e '${commonDir}' ] && echo common-visible\n` +
        `git rev-parse --git-dir >/dev/null 2>&1 && echo git-works\n` +
        `(echo 'gitdir: /tmp/evil' > .git) 2>/dev/null && echo pointer-written\n` +
        `(rm -f .git) 2>/dev/null; [ -e .git ] || echo pointer-removed\n` +
        'echo made > made-by-script.txt\n' +
        'echo "uid=$(id -u) home=$HOME"\n',
    );
    const result = await runCommand(ctx(worktree), { command: 'npm test' });
    assert.equal(result.exitCode, 0, result.stderr);
    assert.doesNotMatch(result.stdout, /common-visible|git-works|pointer-written|pointer-removed/);
    assert.match(result.stdout, /uid=65534 home=\/home\/sandbox/);
    assert.equal(await readFile(path.join(worktree, '.git'), 'utf8'), pointer, 'the .git pointer is unchanged');
    const made = await stat(path.join(worktree, 'made-by-script.txt'));
    assert.equal(made.uid, process.getuid!(), "written as the worker's uid outside");
    assert.equal(await readFile(path.join(worktree, 'made-by-script.txt'), 'utf8'), 'made\n');
  });

  test('in a plain repository a script gets an empty, read-only .git', async () => {
    await writeFile(
      path.join(repo, 'probe.sh'),
      'ls -A .git | wc -l\n(touch .git/x) 2>/dev/null && echo wrote\ntrue\n',
    );
    const result = await runCommand(ctx(repo), { command: 'npm test' });
    assert.equal(result.exitCode, 0, result.stderr);
    assert.match(result.stdout, /^0$/m);
    assert.doesNotMatch(result.stdout, /wrote/);
    await assert.rejects(stat(path.join(repo, '.git', 'x')));
  });
});

describe('nothing outlives the worker', () => {
  test('a worker killed mid-command takes the whole sandbox with it (setsid daemon included)', async () => {
    await writeFile(
      path.join(worktree, 'probe.sh'),
      "setsid sh -c 'sleep 3; echo late > late-after-kill.txt' >/dev/null 2>&1 &\necho > started.txt\nsleep 30\n",
    );
    const script = path.join(scratch[1]!, 'run.mts');
    await writeFile(
      script,
      `import { runCommand } from ${JSON.stringify(pathToFileURL(path.resolve('worker/tools/run-command.ts')).href)};\n` +
        `import { probeSandbox } from ${JSON.stringify(pathToFileURL(path.resolve('worker/sandbox/index.ts')).href)};\n` +
        `const sandbox = await probeSandbox({ mode: 'bwrap' });\n` +
        `const ctx = { root: process.argv[2], writePrefixes: null, allowedCommands: ['npm test'], commandTimeoutMs: 60000, sandbox, beforeTouch: async () => {}, onTouched() {} };\n` +
        `await runCommand(ctx, { command: 'npm test' });\n`,
    );
    const child = spawnNode(script, [worktree]);
    await waitFor(() => existsSync(path.join(worktree, 'started.txt')), {
      timeoutMs: 30_000,
      what: 'the script to start',
    });
    child.kill('SIGKILL');
    await child.exited;
    await new Promise((r) => setTimeout(r, 3500));
    assert.equal(existsSync(path.join(worktree, 'late-after-kill.txt')), false, 'the daemon died with the worker');
  });

  test('cgroups left by a killed worker are removed at the next probe', async () => {
    if (sandbox.mode !== 'bwrap' || !sandbox.usable || sandbox.limiter.kind === 'none') {
      assert.match(describeSandbox(sandbox), /process count not limited/, 'without a cgroup the note says so');
      return;
    }
    let dead = 4_000_000;
    while (existsSync(`/proc/${dead}`)) dead--;
    const parent =
      sandbox.limiter.kind === 'cgroup2' ? '/sys/fs/cgroup/echodo-sandbox' : '/sys/fs/cgroup/pids/echodo-sandbox';
    const stale = path.join(parent, `cmd-${dead}-1`);
    const mine = path.join(parent, `cmd-${process.pid}-999999`);
    await mkdir(stale);
    await mkdir(mine);
    try {
      await probeSandbox({ mode: 'bwrap' });
      assert.equal(existsSync(stale), false, "the dead worker's cgroup is gone");
      assert.equal(existsSync(mine), true, "a live worker's cgroup is left alone");
    } finally {
      await rmdir(mine).catch(() => {});
      await rmdir(stale).catch(() => {});
    }
  });
});

describe('fail closed', () => {
  test('bwrap missing: run_command is refused with the reason, nothing runs', async () => {
    const broken = await probeSandbox({ mode: 'bwrap', bwrapPath: '/nonexistent/bwrap' });
    assert.deepEqual(broken, { mode: 'bwrap', usable: false, reason: 'bubblewrap was not found (/nonexistent/bwrap)' });
    let touched = 0;
    await refused(
      runCommand(ctx(worktree, { sandbox: broken, beforeTouch: async () => void touched++ }), {
        command: 'git status',
      }),
      /^run_command is refused: bubblewrap was not found \(\/nonexistent\/bwrap\)$/,
    );
    assert.equal(touched, 0);
  });

  test('bwrap present but failing: the probe reports its error', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'echodo-fake-bwrap-'));
    scratch.push(dir);
    const fake = path.join(dir, 'bwrap');
    await writeFile(fake, '#!/bin/sh\necho "bwrap: No permissions to create new namespace" >&2\nexit 1\n', {
      mode: 0o755,
    });
    const broken = await probeSandbox({ mode: 'bwrap', bwrapPath: fake });
    assert.equal(
      broken.mode === 'bwrap' && !broken.usable && broken.reason,
      `bubblewrap (${fake}) is not usable here: bwrap: No permissions to create new namespace`,
    );
  });

  test('no sandbox in the context: refused', async () => {
    await refused(
      runCommand(ctx(worktree, { sandbox: undefined }), { command: 'git status' }),
      /no sandbox is configured/,
    );
  });
});
