// Load: many worker processes, runs on two repositories, the stall detector running, and a
// worker SIGKILLed every few seconds (once a checkpoint was written since the last kill). Every run completes, every note is present, seqs have no
// duplicate or gap, and no run was ever written by two lease holders at once.
// `npm test` runs a reduced size; `npm run test:load` (ECHODO_LOAD_FULL=1) the full one.
import assert from 'node:assert/strict';
import { realpath } from 'node:fs/promises';
import { after, before, test } from 'node:test';
import { readCheckpointNote } from '../worker/checkpoints/notes.ts';
import type { Child } from './support/child.ts';
import { makeRepo } from './support/git.ts';
import { registerRepo } from './support/grants.ts';
import { createScenario, sampleSteps, type Scenario } from './support/scenario.ts';

const FULL = process.env.ECHODO_LOAD_FULL === '1';
const WORKERS = FULL ? 8 : 4;
const RUNS = FULL ? 40 : 12;
const ROUNDS = FULL ? 20 : 10;
const KILL_EVERY_MS = [1500, 3000] as const;

let s: Scenario;
let repoB: string;
const children: Child[] = [];

before(async () => {
  s = await createScenario({
    steps: sampleSteps(10, ROUNDS),
    env: { STALL_MAX_ATTEMPTS: '100', WORKER_MAX_TOOL_STEPS: String(ROUNDS + 2) },
  });
  repoB = await makeRepo({ 'README.md': '# second repo\n', 'src/index.ts': 'export const answer = 42;\n' });
  // A repository other than WORKER_REPO_ROOT is one the operator registered to the workspace.
  await registerRepo(s.su, s.workspaceId, await realpath(repoB));
});
after(async () => {
  await Promise.all(children.map((c) => c.stop('SIGKILL', 100)));
  await s?.close();
});

test(
  `load: ${WORKERS} workers, ${RUNS} runs of ${ROUNDS} rounds on 2 repos, a worker killed every few seconds`,
  { timeout: FULL ? 900_000 : 300_000 },
  async () => {
    const started = Date.now();
    const ids: string[] = [];
    for (let i = 0; i < RUNS; i++) ids.push((await s.dispatch(i % 2 ? { repoPath: repoB } : {})).agentRunId);
    const detector = s.spawnStallDetector();
    children.push(detector);
    const pool: Child[] = [];
    const spawnWorker = () => {
      const w = s.spawnWorker();
      children.push(w);
      pool.push(w);
    };
    for (let i = 0; i < WORKERS; i++) spawnWorker();

    let kills = 0;
    let nextKill = Date.now() + KILL_EVERY_MS[0];
    // A kill waits for a checkpoint written since the last one too: on a loaded machine, where a
    // worker takes longer to start than the kill interval, the fleet still makes progress.
    let checkpointsAtKill = -1;
    for (;;) {
      const rows = await s.su<{ status: string }[]>`select status from agent_runs where id in ${s.su(ids)}`;
      if (rows.every((r) => r.status === 'completed' || r.status === 'failed')) break;
      if (Date.now() - started > (FULL ? 840_000 : 280_000))
        assert.fail(`not finished: ${JSON.stringify(rows.map((r) => r.status))}`);
      const [{ n: checkpoints }] = await s.su<{ n: number }[]>`
        select count(*)::int as n from worker_checkpoints where agent_run_id in ${s.su(ids)}`;
      if (Date.now() >= nextKill && checkpoints > checkpointsAtKill) {
        checkpointsAtKill = checkpoints;
        const live = pool.filter((w) => w.process.exitCode === null && w.process.signalCode === null);
        const victim = live[Math.floor(Math.random() * live.length)];
        if (victim) {
          victim.kill('SIGKILL');
          kills++;
        }
        nextKill = Date.now() + KILL_EVERY_MS[0] + Math.random() * (KILL_EVERY_MS[1] - KILL_EVERY_MS[0]);
      }
      // Keep the pool full: killed workers and any that exited are replaced.
      const alive = pool.filter((w) => w.process.exitCode === null && w.process.signalCode === null).length;
      for (let i = alive; i < WORKERS; i++) spawnWorker();
      pool.splice(0, pool.length, ...pool.filter((w) => w.process.exitCode === null && w.process.signalCode === null));
      await new Promise((r) => setTimeout(r, 200));
    }
    const wallMs = Date.now() - started;

    const runs = await s.su<
      { id: string; status: string; attempt: number; failure_reason: string | null; repo: string }[]
    >`
    select id, status, attempt, failure_reason, job->>'repoPath' as repo from agent_runs where id in ${s.su(ids)}`;
    const rows = await s.su<
      { agent_run_id: string; checkpoint_seq: number; lease_epoch: number; commit_oid: string; hash: string }[]
    >`
    select agent_run_id, checkpoint_seq, lease_epoch, commit_oid, hash from worker_checkpoints
     where agent_run_id in ${s.su(ids)} order by agent_run_id, checkpoint_seq`;
    for (const run of runs) {
      assert.equal(run.status, 'completed', `run ${run.id}: ${run.failure_reason}`);
      const mine = rows.filter((r) => r.agent_run_id === run.id);
      assert.deepEqual(
        mine.map((r) => r.checkpoint_seq),
        Array.from({ length: ROUNDS }, (_, i) => i + 1),
        `seqs of ${run.id}`,
      );
      // Fencing: once a newer lease holder wrote, no older one ever wrote again.
      for (let i = 1; i < mine.length; i++)
        assert.ok(mine[i]!.lease_epoch >= mine[i - 1]!.lease_epoch, `run ${run.id} written by two lease holders`);
      for (const row of mine) {
        const note = await readCheckpointNote(run.repo, s.config.WORKER_NOTES_REF, row.commit_oid);
        assert.equal(note?.hash, row.hash, `note of ${run.id} seq ${row.checkpoint_seq}`);
      }
    }
    const resumes = runs.reduce((n, r) => n + r.attempt - 1, 0);
    console.log(
      `load: ${RUNS} runs, ${RUNS * ROUNDS} rounds, ${kills} kills, ${resumes} resumes, ${WORKERS} workers, wall ${(wallMs / 1000).toFixed(1)} s`,
    );
    assert.ok(kills > 0, 'workers were killed');
  },
);
