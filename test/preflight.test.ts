// npm test's preflight (scripts/test-preflight.ts), as real processes with a reduced PATH:
// missing programs and no way to install them → it refuses, naming each and the install command,
// exit ≠ 0, and `npm test` starts nothing; as root on a Debian-like system it installs them with
// apt-get (here a stand-in apt-get on PATH that records its calls), `apt-get update` first.
import assert from 'node:assert/strict';
import { chmod, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { findOnPath, planPreflight, REQUIREMENTS } from '../scripts/test-preflight.ts';
import { spawnNode } from './support/child.ts';

const dirs: string[] = [];
async function binDir(links: Record<string, string> = {}): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'echodo-preflight-'));
  dirs.push(dir);
  for (const [name, target] of Object.entries(links)) await symlink(target, path.join(dir, name));
  return dir;
}

async function preflight(env: Record<string, string | undefined>) {
  const child = spawnNode('scripts/test-preflight.ts', [], { env });
  const { code } = await child.exited;
  return { code, stderr: child.stderr.join('\n') };
}

const real = (name: string) => {
  const found = findOnPath(name, process.env.PATH ?? '');
  assert.ok(found, `${name} is installed on this machine (npm test's own preflight saw to it)`);
  return found;
};
const isRoot = process.getuid?.() === 0;

let fakeAptLog: string;

before(async () => {
  fakeAptLog = path.join(await binDir(), 'apt-get.log');
});

after(async () => {
  await Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true })));
});

test('with redis-server, chromium and bwrap hidden from PATH and no apt-get, it refuses naming each and the install command', async () => {
  const { code, stderr } = await preflight({ PATH: await binDir() });
  assert.notEqual(code, 0);
  assert.equal(code, 1);
  for (const program of ['redis-server', 'chromium', 'bwrap'])
    assert.match(stderr, new RegExp(`missing: ${program} `), `names ${program}`);
  assert.match(stderr, /install with: apt-get update && apt-get install -y redis-server chromium bubblewrap/);
  assert.match(stderr, /skips no test/);
});

test('installing turned off (ECHODO_PREFLIGHT_INSTALL=never): only the missing program is named', async () => {
  const dir = await binDir({ 'redis-server': real('redis-server'), chromium: real('chromium') });
  const { code, stderr } = await preflight({ PATH: dir, ECHODO_PREFLIGHT_INSTALL: 'never' });
  assert.equal(code, 1);
  assert.match(stderr, /missing: bwrap \(Debian package bubblewrap\)/);
  assert.doesNotMatch(stderr, /missing: (redis-server|chromium)/);
  assert.match(stderr, /install with: apt-get update && apt-get install -y bubblewrap\b/);
  assert.match(stderr, /installing is turned off/);
});

test('npm test itself stops before starting anything when the preflight refuses', { timeout: 60_000 }, async () => {
  const child = spawnNode('scripts/test.ts', ['test/fixtures/preflight-never-runs.ts'], {
    env: { PATH: await binDir() },
  });
  const { code } = await child.exited;
  assert.equal(code, 1, child.output());
  assert.match(child.output(), /missing: redis-server/);
  assert.doesNotMatch(
    child.output(),
    /PostgreSQL on|Redis on|PREFLIGHT-FIXTURE-RAN/,
    'no service started, no test run',
  );
});

test('as root on a Debian-like system, missing programs are installed with apt-get (update first), and it says so', async () => {
  // A stand-in apt-get: records each call; `install` puts an executable for each package on PATH.
  const dir = await binDir({ 'redis-server': real('redis-server') });
  const fakeApt = path.join(dir, 'apt-get');
  await writeFile(
    fakeApt,
    [
      '#!/bin/sh',
      `echo "$*" >> '${fakeAptLog}'`,
      'if [ "$1" = install ]; then',
      '  for pkg in "$@"; do',
      '    case "$pkg" in chromium) bin=chromium ;; bubblewrap) bin=bwrap ;; redis-server) bin=redis-server ;; *) continue ;; esac',
      `    printf '#!/bin/sh\\nexit 0\\n' > '${dir}'/$bin && /bin/chmod +x '${dir}'/$bin`,
      '  done',
      'fi',
    ].join('\n'),
  );
  await chmod(fakeApt, 0o755);
  const { code, stderr } = await preflight({ PATH: dir });
  if (!isRoot) {
    // Not root: nothing may be installed; the refusal says why.
    assert.equal(code, 1);
    assert.match(stderr, /not running as root/);
    return;
  }
  assert.equal(code, 0, stderr);
  const calls = (await readFile(fakeAptLog, 'utf8')).trim().split('\n');
  assert.deepEqual(
    calls,
    ['update -qq', 'install -y -qq --no-install-recommends chromium bubblewrap'],
    'one update, then only the missing packages',
  );
  assert.match(stderr, /missing chromium, bwrap; installing chromium bubblewrap with apt-get/);
  assert.match(stderr, /installed chromium bubblewrap/);
  assert.match(stderr, new RegExp(`ready: redis-server .*chromium ${dir}/chromium, bubblewrap ${dir}/bwrap`));
});

test('the plan: ready when all are there, else install only as root with apt-get, else refuse', () => {
  const everything = process.env.PATH ?? '';
  assert.equal(planPreflight({ path: everything, isRoot: false, aptGet: null, installAllowed: true }).action, 'ready');
  const none = { path: '/nonexistent', installAllowed: true };
  const install = planPreflight({ ...none, isRoot: true, aptGet: '/usr/bin/apt-get' });
  assert.equal(install.action, 'install');
  assert.deepEqual(
    install.action === 'install' && install.missing.map((m) => m.aptPackage),
    REQUIREMENTS.map((r) => r.aptPackage),
  );
  assert.equal(planPreflight({ ...none, isRoot: false, aptGet: '/usr/bin/apt-get' }).action, 'refuse');
  assert.equal(planPreflight({ ...none, isRoot: true, aptGet: null }).action, 'refuse');
  assert.equal(
    planPreflight({ ...none, isRoot: true, aptGet: '/usr/bin/apt-get', installAllowed: false }).action,
    'refuse',
  );
});
