// `npm run demo` on embedded defaults: the story completes and the summary says what happened.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { stopEmbeddedPostgres } from '../store/embedded.ts';
import { spawnNode } from './support/child.ts';

let home: string | undefined;
after(async () => {
  if (home) {
    await stopEmbeddedPostgres(home);
    await rm(home, { recursive: true, force: true });
  }
});

test('npm run demo kills the worker mid-brief, resumes it and prints the summary', { timeout: 180_000 }, async () => {
  home = await mkdtemp(path.join(os.tmpdir(), 'echodo-demo-'));
  const demo = spawnNode('scripts/demo.ts', [], {
    env: { ECHODO_HOME: home, DATABASE_URL: undefined, REDIS_URL: undefined, MISSION_CONTROL_PORT: '4799' },
  });
  const exit = await demo.exited;
  const out = demo.output();
  assert.equal(exit.code, 0, out.slice(-3000));
  assert.match(out, /sandbox {10}bwrap sandbox: no network/, 'the run_command sandbox is named before the story');
  assert.match(out, /SIGKILL worker-1/, 'the worker is killed mid-brief');
  assert.match(out, /stall detector {2}re-dispatched/, 'the stall detector re-dispatches');
  assert.match(out, /worker-2 {2}resuming from checkpoint \d+/, 'a new worker resumes from a checkpoint');
  assert.match(out, /"checkpointSeq":8/, 'git notes show the latest checkpoint');
  assert.match(out, /intact: worktree, Postgres and git notes agree/);
  assert.match(out, /worktrees created {2}1 /);
  assert.match(out, /run status {9}completed \(attempt 2\)/);
  assert.match(out, /sign in with the demo workspace token: emc_/);
});
