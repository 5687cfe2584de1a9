// Fencing: a worker SIGSTOPped past its lease is replaced; when it wakes (SIGCONT) it writes
// no row, no note and no file, and exits. A lease lost is counted once in the worker's metrics.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { readCheckpointNote } from '../worker/checkpoints/notes.ts';
import { LEASE_LOST_EXIT, WorkerDaemon } from '../worker/daemon.ts';
import { createLogger } from '../worker/log.ts';
import { workerRegistry } from '../worker/metrics.ts';
import { createQueue } from '../worker/queue/index.ts';
import { checkRunIntegrity } from '../operator/integrity.ts';
import { waitFor, type Child } from './support/child.ts';
import { readMetrics } from './support/metrics.ts';
import { createScenario, sampleSteps, type Scenario } from './support/scenario.ts';

let s: Scenario;
const children: Child[] = [];

before(async () => {
  s = await createScenario({ steps: sampleSteps(250, 8) });
});
after(async () => {
  await Promise.all(children.map((c) => c.stop('SIGKILL', 100)));
  await s?.close();
});

test('a paused worker is fenced off: after SIGCONT it writes nothing and exits', { timeout: 90_000 }, async () => {
  const { agentRunId } = await s.dispatch();
  const zombie = s.spawnWorker();
  children.push(zombie);
  await waitFor(async () => (await s.checkpoints(agentRunId)).length >= 2, {
    timeoutMs: 20_000,
    what: 'two checkpoints',
  });
  zombie.kill('SIGSTOP');
  const stoppedAt = await s.run(agentRunId);
  const zombieEpoch = stoppedAt.lease_epoch as number;
  const zombieRows = (await s.checkpoints(agentRunId)).filter((r) => r.lease_epoch === zombieEpoch).length;
  const zombieLines = () => zombie.lines.filter((l) => l.includes('"tool round done"')).length;
  const roundsBeforeStop = zombieLines();

  // The lease runs out; the stall detector re-dispatches; another worker takes over.
  await waitFor(async () => (await s.sweep()).redispatched.includes(agentRunId), {
    timeoutMs: 15_000,
    what: 're-dispatch',
  });
  const successor = s.spawnWorker();
  children.push(successor);
  await waitFor(async () => (await s.checkpoints(agentRunId)).some((r) => r.lease_epoch > zombieEpoch), {
    timeoutMs: 20_000,
    what: 'the successor to checkpoint',
  });

  zombie.kill('SIGCONT');
  const exit = await Promise.race([
    zombie.exited,
    new Promise<never>((_, reject) =>
      setTimeout(() => reject(new Error(`zombie did not exit:\n${zombie.lines.slice(-8).join('\n')}`)), 20_000),
    ),
  ]);
  assert.equal(exit.code, LEASE_LOST_EXIT, 'the zombie exits with the lease-lost code');
  assert.ok(
    zombie.lines.some((l) => l.includes('lease')),
    'it says why',
  );

  const run = await s.waitForStatus(agentRunId, 'completed');
  await successor.stop('SIGTERM');
  const rows = await s.checkpoints(agentRunId);
  assert.equal(
    rows.filter((r) => r.lease_epoch === zombieEpoch).length,
    zombieRows,
    'no row from the zombie after it was paused',
  );
  assert.equal(zombieLines(), roundsBeforeStop, 'the zombie ran no tool round after waking');
  assert.deepEqual(
    rows.map((r) => r.checkpoint_seq),
    rows.map((_, i) => i + 1),
  );
  assert.ok(run.lease_epoch > zombieEpoch, 'the successor holds a newer epoch');
  for (const row of rows) {
    const note = await readCheckpointNote(s.repo, s.config.WORKER_NOTES_REF, row.commit_oid);
    assert.equal(note?.hash, row.hash, `note of seq ${row.checkpoint_seq} is the row's, not the zombie's`);
  }
  const report = await checkRunIntegrity(s.t.db, s.config, s.workspaceId, agentRunId);
  assert.deepEqual(report?.findings, [], 'the worktree holds exactly what the checkpoints say: no stray file');
});

test('a lease lost is counted once in the metrics of the worker that lost it', { timeout: 60_000 }, async () => {
  // In this process: a worker that lost its lease exits at once, so no scrape of another process
  // could see its count. Heartbeats far apart, so the loss is read as a takeover, not a cut-off.
  const config = { ...s.config, WORKER_HEARTBEAT_MS: 1000, WORKER_LEASE_MS: 10_000 };
  const queue = createQueue({ config, db: s.t.db, workerId: 'in-process' });
  const log = createLogger({ level: 'silent' });
  const daemon = new WorkerDaemon({ config, db: s.t.db, queue, workerId: 'in-process', log });
  const { agentRunId } = await s.dispatch();
  const exited = daemon.run();
  try {
    await waitFor(async () => (await s.checkpoints(agentRunId)).length >= 1, {
      timeoutMs: 20_000,
      what: 'a checkpoint',
    });
    // Another holder takes the run over: the epoch moves on under the worker.
    await s.su`update agent_runs set lease_epoch = lease_epoch + 1 where id = ${agentRunId}`;
    assert.equal(await exited, LEASE_LOST_EXIT);
  } finally {
    daemon.stop();
    await exited.catch(() => {});
    await queue.close();
  }
  const m = readMetrics(await workerRegistry.metrics());
  assert.equal(m.value('echodo_lease_losses_total'), '1');
  assert.deepEqual(m.byLabel('echodo_worker_runs_finished_total', 'outcome'), { lease_lost: '1' });
});
