// The kill harness: real worker processes SIGKILLed at named fault points and at random times.
// Every run must complete from its last checkpoint with a tree byte-identical to an uncrashed
// run's, seqs 1..n without gaps, one worktree ever, at most N rounds redone per crash, and every
// checkpoint mirrored as a git note.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { verifyChain } from '../core/checkpoint-hash.ts';
import { readCheckpointNote } from '../worker/checkpoints/notes.ts';
import { checkRunIntegrity } from '../operator/integrity.ts';
import type { Child } from './support/child.ts';
import { createScenario, sampleSteps, type Scenario } from './support/scenario.ts';

const ROUNDS = 8;
const EVERY_N = 1; // WORKER_CHECKPOINT_EVERY_N_STEPS: at most this many rounds redone per crash
const RANDOM_RUNS = 30;

let s: Scenario;
let baselineTree: string;
const workers: Child[] = [];
const spawn = (env: Record<string, string> = {}) => {
  const w = s.spawnWorker(env);
  workers.push(w);
  return w;
};

/** 'tool round done' log lines of a run, across every worker process that touched it. */
function roundsExecuted(agentRunId: string): number {
  return workers.flatMap((w) => w.lines).filter((l) => l.includes('"tool round done"') && l.includes(agentRunId))
    .length;
}

async function assertRecovered(agentRunId: string) {
  const run = await s.run(agentRunId);
  assert.equal(run.status, 'completed', `run ${agentRunId}: ${run.failure_reason ?? ''}`);
  assert.equal(await s.branchTree(agentRunId), baselineTree, 'final tree differs from the uncrashed run');
  const rows = await s.checkpoints(agentRunId);
  assert.deepEqual(
    rows.map((r) => r.checkpoint_seq),
    Array.from({ length: ROUNDS }, (_, i) => i + 1),
    'seqs 1..n without gaps',
  );
  assert.ok(verifyChain(rows as never).ok, 'hash chain verifies');
  assert.equal((await s.events(agentRunId, 'worktree_created')).length, 1, 'no worktree created after the first');
  const crashes = run.attempt - 1;
  const redone = roundsExecuted(agentRunId) - ROUNDS;
  assert.ok(redone <= crashes * EVERY_N, `${redone} rounds redone after ${crashes} crash(es)`);
  for (const row of rows) {
    const note = await readCheckpointNote(s.repo, s.config.WORKER_NOTES_REF, row.commit_oid);
    assert.equal(note?.checkpointSeq, row.checkpoint_seq, `note of seq ${row.checkpoint_seq}`);
    assert.equal(note?.hash, row.hash);
  }
  const report = await checkRunIntegrity(s.t.db, s.config, s.workspaceId, agentRunId);
  assert.deepEqual(report?.findings, []);
  return { crashes, redone };
}

/** Sweeps until every run is re-dispatched or done, while clean workers finish them. */
async function finishAll(ids: string[]) {
  const finishers = [spawn(), spawn()];
  const deadline = Date.now() + 180_000;
  for (;;) {
    await s.sweep();
    const rows = await s.su`select id, status from agent_runs where id in ${s.su(ids)}`;
    if (rows.every((r) => r.status === 'completed' || r.status === 'failed')) break;
    if (Date.now() > deadline) throw new Error(`runs not finished: ${JSON.stringify(rows)}`);
    await new Promise((r) => setTimeout(r, 150));
  }
  await Promise.all(finishers.map((w) => w.stop('SIGTERM', 5000)));
}

before(async () => {
  // Leases long enough that a late heartbeat on a loaded machine is not taken for a stall.
  s = await createScenario({
    steps: sampleSteps(40, ROUNDS),
    env: { WORKER_LEASE_MS: '15000', WORKER_HEARTBEAT_MS: '500' },
  });
  const { agentRunId } = await s.dispatch();
  const w = spawn();
  await s.waitForStatus(agentRunId, 'completed', 120_000);
  await w.stop('SIGTERM');
  baselineTree = await s.branchTree(agentRunId);
});

after(async () => {
  await Promise.all(workers.map((w) => w.stop('SIGKILL', 100)));
  await s?.close();
});

describe('SIGKILL at named fault points', () => {
  const points = [
    'after-content-commit@3',
    'after-checkpoint-row@3',
    'after-note@3',
    'mid-write-file@2',
    'during-command@1',
    'during-model-call@4',
    'before-tool-call@5',
    'after-claim@1',
  ];
  test(
    `each of ${points.length} fault points: the run resumes and completes as if never crashed`,
    { timeout: 300_000 },
    async () => {
      const ids: string[] = [];
      for (const point of points) ids.push((await s.dispatch()).agentRunId);
      const faulty = points.map((point) => spawn({ ECHODO_FAULT: point }));
      const exits = await Promise.all(faulty.map((w) => w.exited));
      for (const [i, exit] of exits.entries())
        assert.equal(
          exit.signal,
          'SIGKILL',
          `worker with ${points[i]} was killed at its fault point (exit ${exit.code}): ${faulty[i]!.lines.filter((l) =>
            /"level":[45]0/.test(l),
          )
            .join(' | ')
            .slice(0, 800)}`,
        );
      await finishAll(ids);
      for (const id of ids) {
        const { crashes } = await assertRecovered(id);
        assert.ok(crashes >= 1, `run ${id} was crashed and resumed`);
      }
    },
  );
});

describe('SIGKILL at random times', () => {
  test(`${RANDOM_RUNS} runs, each with a worker killed at a random instant`, { timeout: 900_000 }, async () => {
    const ids: string[] = [];
    const BATCH = 3;
    let killed = 0;
    for (let b = 0; b < RANDOM_RUNS / BATCH; b++) {
      const batch: string[] = [];
      for (let i = 0; i < BATCH; i++) batch.push((await s.dispatch()).agentRunId);
      ids.push(...batch);
      const victims = Array.from({ length: BATCH }, () => spawn());
      await Promise.all(
        victims.map(async (w) => {
          await w.waitForLine(/"run (started|resumed)"/, { timeoutMs: 180_000 });
          await new Promise((r) => setTimeout(r, Math.random() * 500)); // somewhere inside the run
          w.kill('SIGKILL');
          killed++;
        }),
      );
      await finishAll(batch);
    }
    let crashes = 0;
    let redone = 0;
    for (const id of ids) {
      const r = await assertRecovered(id);
      crashes += r.crashes;
      redone += r.redone;
    }
    console.log(
      `random kills: ${ids.length} runs, ${killed} workers killed, ${crashes} resumes, ${redone} rounds redone`,
    );
    assert.ok(crashes >= ids.length / 2, 'most kills landed inside a run');
  });
});
