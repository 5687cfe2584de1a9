// Shared endings of the multi-worker tests: drive every run to an end, then check it against an
// uncrashed run's tree and the integrity check.
import assert from 'node:assert/strict';
import { checkRunIntegrity } from '../../operator/integrity.ts';
import type { Child } from './child.ts';
import type { Scenario } from './scenario.ts';

/** Sweeps (re-dispatching stalled runs) while `finishers` clean workers finish every run in ids. */
export async function finishAll(
  s: Scenario,
  spawnWorker: () => Child,
  ids: string[],
  { finishers = 1, timeoutMs = 300_000 }: { finishers?: number; timeoutMs?: number } = {},
): Promise<void> {
  const clean = Array.from({ length: finishers }, () => spawnWorker());
  const deadline = Date.now() + timeoutMs;
  try {
    for (;;) {
      await s.sweep();
      const rows = await s.su`select id, status, failure_reason from agent_runs where id in ${s.su(ids)}`;
      if (rows.every((r) => r.status === 'completed' || r.status === 'failed')) break;
      if (Date.now() > deadline) throw new Error(`runs not finished: ${JSON.stringify(rows)}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  } finally {
    await Promise.all(clean.map((w) => w.stop('SIGTERM', 5000)));
  }
}

/** The run completed, its branch holds the uncrashed run's tree, and integrity-check finds nothing. */
export async function assertCompletedLike(
  s: Scenario,
  agentRunId: string,
  baselineTree: string,
  context = '',
): Promise<void> {
  const run = await s.run(agentRunId);
  assert.equal(
    run.status,
    'completed',
    `run ${agentRunId}: ${run.failure_reason ?? ''}${context ? `\n${context}` : ''}`,
  );
  assert.equal(await s.branchTree(agentRunId), baselineTree, "the final tree is an uncrashed run's");
  const report = await checkRunIntegrity(s.t.db, s.config, s.workspaceId, agentRunId);
  assert.deepEqual(report?.findings, [], `integrity of ${agentRunId}`);
}
