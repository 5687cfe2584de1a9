// ECHODO_HOME's default: ~/.echodo, unless the process is root and its home is closed to other
// users, where the embedded PostgreSQL (run as postgres) could not start: /var/lib/echodo then.
import assert from 'node:assert/strict';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { defaultHome, parseConfig, ROOT_FALLBACK_HOME } from '../core/config.ts';

const savedHome = process.env.HOME;
const dirs: string[] = [];
after(async () => {
  process.env.HOME = savedHome;
  await Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true })));
});

async function homeWithMode(mode: number): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'echodo-config-home-'));
  dirs.push(dir);
  await chmod(dir, mode);
  return dir;
}

test('root whose home others cannot enter gets /var/lib/echodo; an open home, or another user, gets ~/.echodo', async () => {
  const closed = await homeWithMode(0o700);
  const open = await homeWithMode(0o711);
  process.env.HOME = closed; // os.homedir() reads HOME
  assert.equal(defaultHome(0), ROOT_FALLBACK_HOME);
  assert.equal(defaultHome(1000), path.join(closed, '.echodo'));
  process.env.HOME = open;
  assert.equal(defaultHome(0), path.join(open, '.echodo'));
});

test('the configuration reads the default when it parses, not when it is loaded', async () => {
  const closed = await homeWithMode(0o700);
  process.env.HOME = closed;
  const expected = process.getuid?.() === 0 ? ROOT_FALLBACK_HOME : path.join(closed, '.echodo');
  assert.equal(parseConfig({}).ECHODO_HOME, expected);
  process.env.HOME = await homeWithMode(0o755);
  assert.equal(parseConfig({}).ECHODO_HOME, path.join(process.env.HOME, '.echodo'));
});
