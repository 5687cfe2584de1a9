// Four workers making worktrees on one repository at once (worktree creation and the
// repair of half-made admin folders are serialized per repository by core/file-lock.ts), one
// of them SIGKILLed at a random instant: every run completes, every admin folder is complete.
import assert from 'node:assert/strict';
import { mkdtemp, readdir, readFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { Child } from './support/child.ts';
import { assertCompletedLike, finishAll } from './support/finish.ts';
import { createScenario, sampleSteps, type Scenario } from './support/scenario.ts';

let s: Scenario;
let baselineTree: string;
const workers: Child[] = [];
const spawnWorker = (env: Record<string, string> = {}) => {
  const w = s.spawnWorker(env);
  workers.push(w);
  return w;
};

before(async () => {
  const base = path.join(await mkdtemp(path.join(os.tmpdir(), 'echodo-wtrace-')), 'worktrees');
  // Leases long enough that a loaded machine's late heartbeat is not taken for a stall.
  s = await createScenario({
    steps: sampleSteps(10, 2),
    env: { WORKER_WORKTREE_BASE: base, WORKER_LEASE_MS: '6000', WORKER_HEARTBEAT_MS: '300' },
  });
  const { agentRunId } = await s.dispatch();
  const first = spawnWorker();
  await s.waitForStatus(agentRunId, 'completed', 180_000);
  await first.stop('SIGTERM');
  baselineTree = await s.branchTree(agentRunId);
});

after(async () => {
  await Promise.all(workers.map((w) => w.stop('SIGKILL', 100)));
  await s?.close();
});

describe('four workers making worktrees on one repository at once', () => {
  test('20 runs, one worker SIGKILLed at a random instant: every run completes', { timeout: 600_000 }, async () => {
    const ids: string[] = [];
    for (let i = 0; i < 20; i++) ids.push((await s.dispatch()).agentRunId);
    const four = Array.from({ length: 4 }, () => spawnWorker());
    await Promise.all(four.map((w) => w.waitForLine(/"worker started"/, { timeoutMs: 180_000 })));
    await new Promise((r) => setTimeout(r, Math.random() * 1_500));
    const victim = four[Math.floor(Math.random() * four.length)]!;
    victim.kill('SIGKILL');
    await finishAll(s, spawnWorker, ids, { timeoutMs: 400_000 });
    for (const id of ids) await assertCompletedLike(s, id, baselineTree);
    const admins = await readdir(path.join(s.repo, '.git', 'worktrees'));
    for (const name of admins) {
      const head = await readFile(path.join(s.repo, '.git', 'worktrees', name, 'HEAD'), 'utf8').catch(() => '');
      assert.ok(head.trim(), `admin folder ${name} is complete`);
    }
    await Promise.all(four.map((w) => w.stop('SIGTERM', 5000)));
  });
});
