// The stall detector: an expired lease is re-dispatched once however many detectors sweep at
// once (attempt + 1, the old holder fenced off), and a run out of attempts is failed.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { claimRun } from '../store/runs.ts';
import { withWorkspace } from '../store/workspace.ts';
import { parseConfig } from '../core/config.ts';
import { createLogger } from '../worker/log.ts';
import { sweepStalledRuns } from '../operator/stall-detector.ts';
import { createScenario, sampleSteps, type Scenario } from './support/scenario.ts';

let s: Scenario;
before(async () => {
  s = await createScenario({ steps: sampleSteps(0, 2), env: { STALL_MAX_ATTEMPTS: '2' } });
});
after(async () => s?.close());

/** A claimed run whose worker went silent: its lease is already past. */
async function stalledRun(): Promise<{ id: string; epoch: number }> {
  const { agentRunId } = await s.dispatch();
  const run = await withWorkspace(s.t.db.app, s.workspaceId, (tx) =>
    claimRun(tx, { agentRunId, workerId: 'gone', leaseMs: 60_000 }),
  );
  await s.su`update agent_runs set lease_expires_at = now() - interval '1 second' where id = ${agentRunId}`;
  return { id: agentRunId, epoch: run!.lease_epoch };
}

test('two detectors sweeping at once re-dispatch a stalled run exactly once', async () => {
  const { id, epoch } = await stalledRun();
  const log = createLogger({ level: 'silent' });
  // Three detectors, as three processes would: each its own config, the same database.
  const results = await Promise.all(
    [0, 1, 2].map(() => sweepStalledRuns({ config: parseConfig(s.env), db: s.t.db, queue: s.queue, log })),
  );
  assert.equal(results.filter((r) => r.redispatched.includes(id)).length, 1, 'one sweep re-dispatched it');
  const run = await s.run(id);
  assert.equal(run.status, 'queued');
  assert.equal(run.attempt, 2, 'attempt + 1');
  assert.ok(run.lease_epoch > epoch, 'the silent holder is fenced off');
  assert.equal(run.job.resumeFromCheckpoint, true, 'resumeFromCheckpoint is set');
  assert.equal(run.job.agentRunId, id, 'the same agentRunId');
  assert.equal((await s.events(id, 'run_redispatched')).length, 1, 'one run_redispatched event');
});

test('a run that stalls on its last attempt is failed with a run_failed event and its reason', async () => {
  const { id } = await stalledRun();
  await s.su`update agent_runs set attempt = 2 where id = ${id}`; // STALL_MAX_ATTEMPTS is 2
  const result = await s.sweep();
  assert.deepEqual(result.failed, [id]);
  const run = await s.run(id);
  assert.equal(run.status, 'failed');
  assert.match(run.failure_reason, /stalled on attempt 2 of 2/);
  const [event] = await s.events(id, 'run_failed');
  assert.match(event!.metadata.reason, /giving up/, 'the event carries the reason');
  assert.equal((await s.su`select status from briefs where id = ${run.brief_id}`)[0]!.status, 'done');
});
