// The kill harness across hosts: a worker on host A SIGKILLs itself at a named fault point
// around the checkpoint push (before the push; after the push, before the row; after the row, before
// its note), at the first, a middle and the last checkpoint, and the run resumes on host B (its own
// clone, 20 commits behind the run's base; its own worktree base and WORKER_HOST_ID; the same
// Postgres; one bare remote behind a real `git daemon`). Then a run killed on A, killed again on B and
// finished back on A (whose stale worktree is reused). Every run: no lost or duplicated checkpoint,
// the uncrashed run's final tree, every row's commit and note on the remote, integrity intact.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { verifyChain } from '../core/checkpoint-hash.ts';
import { LeaseLostError } from '../core/errors.ts';
import { RemotePusher } from '../worker/remote/push.ts';
import { createLogger } from '../worker/log.ts';
import type { Child } from './support/child.ts';
import { git } from './support/git.ts';
import {
  assertFinishedOnRemote,
  dispatchToHosts,
  moveOn,
  setUpHosts,
  spawnOnHost,
  stopProcesses,
  type Host,
  type Hosts,
} from './support/hosts.ts';
import { createScenario, sampleSteps, type Scenario } from './support/scenario.ts';

const ROUNDS = 6;
const EVERY_N = 1; // WORKER_CHECKPOINT_EVERY_N_STEPS: at most this many rounds redone per crash
// The victims' lease: shorter than the finishers', so the sweep hands their runs on soon after the
// kill, yet long enough that seven workers starting at once on a loaded machine keep theirs.
const VICTIM_LEASE = { WORKER_LEASE_MS: '10000', WORKER_HEARTBEAT_MS: '500' };

let s: Scenario;
let hosts: Hosts;
let a: Host;
let b: Host;
let baselineTree: string;
const workers: Child[] = [];

const spawnOn = (host: Host, extra: Record<string, string> = {}) => spawnOnHost(s, workers, host, extra);
const dispatch = () => dispatchToHosts(s);

/** 'tool round done' log lines of a run, across every worker process that touched it. */
const roundsExecuted = (agentRunId: string) =>
  workers.flatMap((w) => w.lines).filter((l) => l.includes('"tool round done"') && l.includes(agentRunId)).length;

/** Sweeps (re-dispatching stalled runs) while clean workers on `host` finish every run in ids. */
async function finishOn(host: Host, ids: string[], finishers = 2): Promise<void> {
  const clean = Array.from({ length: finishers }, () => spawnOn(host));
  const deadline = Date.now() + 240_000;
  try {
    for (;;) {
      await s.sweep();
      const rows = await s.su`select id, status from agent_runs where id in ${s.su(ids)}`;
      if (rows.every((r) => r.status === 'completed' || r.status === 'failed')) break;
      if (Date.now() > deadline)
        throw new Error(
          `runs not finished on ${host.id}: ${JSON.stringify(rows)}\n${clean.flatMap((w) => w.lines.slice(-20)).join('\n')}`,
        );
      await new Promise((r) => setTimeout(r, 200));
    }
  } finally {
    await Promise.all(clean.map((w) => w.stop('SIGTERM', 8000)));
  }
}

/** The victim died by its own fault point, not by anything else. */
async function assertKilledAt(w: Child, point: string): Promise<void> {
  const exit = await w.exited;
  const errors = w.lines
    .filter((l) => /"level":[45]0/.test(l))
    .join(' | ')
    .slice(0, 800);
  assert.equal(exit.signal, 'SIGKILL', `worker with ${point} killed at its fault point (exit ${exit.code}): ${errors}`);
  assert.ok(
    w.lines.some((l) => l.includes(`fault point ${point.split('@')[0]} reached`)),
    `${point} reached`,
  );
}

/** What the remote's copy of the run's branch holds, or null when the branch is not there. */
const remoteTip = (branch: string) =>
  git(hosts.remoteDir, 'rev-parse', '--verify', '--quiet', `refs/heads/${branch}`).catch(() => null);

/** The run finished on `host` like an uncrashed run, with at most N rounds redone per crash. */
async function assertRecoveredOn(host: Host, agentRunId: string): Promise<Record<string, any>[]> {
  const finishedOn = await assertFinishedOnRemote(s, hosts, agentRunId, ROUNDS, baselineTree);
  assert.equal(finishedOn.id, host.id, `run ${agentRunId} finished on ${host.id}`);
  const rows = await s.checkpoints(agentRunId);
  assert.ok(verifyChain(rows as never).ok, 'hash chain verifies');
  const run = await s.run(agentRunId);
  const crashes = run.attempt - 1;
  const redone = roundsExecuted(agentRunId) - ROUNDS;
  assert.ok(crashes >= 1, `run ${agentRunId} was crashed and resumed`);
  assert.ok(redone <= crashes * EVERY_N, `run ${agentRunId}: ${redone} rounds redone after ${crashes} crash(es)`);
  assert.equal(
    (await s.events(agentRunId, 'worktree_created')).length,
    1,
    "a resume adds its worktree, never creates the run's anew",
  );
  return s.events(agentRunId, 'run_resumed');
}

before(async () => {
  s = await createScenario({
    steps: sampleSteps(40, ROUNDS),
    env: { WORKER_LEASE_MS: '15000', WORKER_HEARTBEAT_MS: '500' },
  });
  hosts = await setUpHosts(s, ['a', 'b']);
  ({ a, b } = hosts.byName as { a: Host; b: Host });
  // The repository moved on after host B cloned it: B lacks the base of every run A starts.
  await moveOn(hosts, a.repo, 20);
  // The uncrashed run, on host A: its tree is the reference for every resumed run.
  const { agentRunId } = await dispatch();
  const w = spawnOn(a);
  await s.waitForStatus(agentRunId, 'completed', 120_000);
  await w.stop('SIGTERM', 8000);
  baselineTree = await git(a.repo, 'rev-parse', `refs/heads/${(await s.run(agentRunId)).branch}^{tree}`);
});

after(async () => {
  await stopProcesses(workers);
  await hosts?.close();
  await s?.close();
});

describe("killed before the first checkpoint reached the remote; host B lacks the run's base", () => {
  test('host B fetches the base by its oid and starts the run again from it', { timeout: 300_000 }, async () => {
    const { agentRunId } = await dispatch();
    const victim = spawnOn(a, { ECHODO_FAULT: 'before-push@1', ...VICTIM_LEASE });
    await assertKilledAt(victim, 'before-push@1');
    assert.equal((await s.checkpoints(agentRunId)).length, 0, 'no checkpoint counted');
    const run = await s.run(agentRunId);
    assert.equal(await remoteTip(run.branch), null, 'nothing of the run on the remote');
    assert.equal(
      await git(b.repo, 'cat-file', '-t', run.base_oid).catch(() => 'missing'),
      'missing',
      "host B lacks the run's base",
    );
    await finishOn(b, [agentRunId], 1);
    const [resumed, ...more] = await assertRecoveredOn(b, agentRunId);
    assert.equal(more.length, 0, 'resumed once');
    assert.deepEqual(
      [resumed!.metadata.fromSeq, resumed!.metadata.fromHost, resumed!.metadata.toHost],
      [0, a.id, b.id],
    );
    assert.ok(resumed!.metadata.fetchedBytes > 0, 'the base was fetched');
  });
});

describe('SIGKILL at the push fault points on host A, resumed on host B', () => {
  // [fault point, rows that counted before the kill, what the remote branch holds at the kill]
  const cases = [
    ['after-push@1', 0, 'a commit no row names'],
    ['before-push@3', 2, "the last row's commit"],
    ['after-push@3', 2, 'a commit no row names'],
    ['after-checkpoint-row@3', 3, "the last row's commit"],
    ['after-push@6', 5, 'a commit no row names'],
    ['after-checkpoint-row@6', 6, "the last row's commit"],
  ] as const;
  test(
    `each of ${cases.length} kills: the run resumes on the other host with no lost or duplicated checkpoint`,
    { timeout: 420_000 },
    async () => {
      const ids: string[] = [];
      for (let i = 0; i < cases.length; i++) ids.push((await dispatch()).agentRunId);
      const victims = cases.map(([point]) => spawnOn(a, { ECHODO_FAULT: point, ...VICTIM_LEASE }));
      for (const [i, [point, rowsLeft, remoteHolds]] of cases.entries()) {
        await assertKilledAt(victims[i]!, point);
        // Which run the victim took: the one whose worker log names it.
        const id = ids.find((runId) => victims[i]!.lines.some((l) => l.includes(runId)))!;
        assert.ok(id, `the ${point} victim took a run`);
        const rows = await s.checkpoints(id);
        assert.equal(rows.length, rowsLeft, `${point}: checkpoints that counted before the kill`);
        const run = await s.run(id);
        const tip = await remoteTip(run.branch);
        if (remoteHolds === "the last row's commit")
          assert.equal(tip, rows.at(-1)!.commit_oid, `${point}: the remote holds the last row's commit`);
        else
          assert.ok(tip && !rows.some((r) => r.commit_oid === tip), `${point}: the remote holds a commit no row names`);
      }
      await finishOn(b, ids);
      for (const [i, [point, rowsLeft]] of cases.entries()) {
        const id = ids.find((runId) => victims[i]!.lines.some((l) => l.includes(runId)))!;
        const resumed = await assertRecoveredOn(b, id);
        assert.equal(resumed.length, 1, `${point}: resumed once`);
        assert.equal(resumed[0]!.metadata.fromSeq, rowsLeft, `${point}: resumed from the last row`);
        assert.equal(resumed[0]!.metadata.recloned, false);
        if (rowsLeft > 0) {
          // (Before the first checkpoint there is nothing of the run's own to fetch: the base is already on B.)
          assert.equal(resumed[0]!.metadata.fromHost, a.id, `${point}: fetched from the remote, from host A`);
          assert.equal(resumed[0]!.metadata.toHost, b.id);
        }
      }
    },
  );
});

describe('killed on A, killed again on B, finished back on A', () => {
  test('host A reuses its stale worktree after host B moved the run on', { timeout: 300_000 }, async () => {
    const { agentRunId } = await dispatch();
    const first = spawnOn(a, { ECHODO_FAULT: 'after-push@2', ...VICTIM_LEASE });
    await assertKilledAt(first, 'after-push@2');
    assert.equal((await s.checkpoints(agentRunId)).length, 1);
    // On B: its first checkpoint (seq 2) counts, the second (seq 3) is pushed and killed before its row.
    const second = spawnOn(b, { ECHODO_FAULT: 'after-push@2', ...VICTIM_LEASE });
    const deadline = Date.now() + 120_000;
    while (second.process.exitCode === null && second.process.signalCode === null) {
      if (Date.now() > deadline)
        throw new Error(`the host B victim never reached its fault point:\n${second.lines.slice(-30).join('\n')}`);
      await s.sweep();
      await new Promise((r) => setTimeout(r, 200));
    }
    await assertKilledAt(second, 'after-push@2');
    const rows = await s.checkpoints(agentRunId);
    assert.equal(rows.length, 2, 'seq 2 written on B before the kill');
    assert.equal((await s.run(agentRunId)).host_id, b.id);
    const tip = await remoteTip((await s.run(agentRunId)).branch);
    assert.ok(tip && !rows.some((r) => r.commit_oid === tip), "the remote holds B's commit that no row names");
    await finishOn(a, [agentRunId], 1);
    const resumed = await assertRecoveredOn(a, agentRunId);
    assert.deepEqual(
      resumed.map((e) => [e.metadata.fromHost, e.metadata.toHost, e.metadata.fromSeq]),
      [
        [a.id, b.id, 1],
        [b.id, a.id, 2],
      ],
    );
    const run = await s.run(agentRunId);
    assert.equal(run.attempt, 3);
  });
});

describe("a fenced worker's late force", () => {
  test(
    "a newer holder's push landing between the fencing check and the force is never overwritten",
    { timeout: 60_000 },
    async () => {
      // The remote branch holds X, a commit no row names (a push killed before its row): the old
      // holder's fast-forward is refused, it confirms its lease, and forces. Between its check and
      // its force, the run is taken over and the new holder pushes its counted checkpoint N.
      const branch = `fence-race-${Date.now()}`;
      const ref = `refs/heads/${branch}`;
      const tree = await git(a.repo, 'rev-parse', 'main^{tree}');
      const commit = (msg: string, parent: string) => git(a.repo, 'commit-tree', tree, '-p', parent, '-m', msg);
      const base = await git(a.repo, 'rev-parse', 'main');
      const row1 = await commit('checkpoint 1', base);
      const killed = await commit('checkpoint 2 (killed before its row)', row1);
      const newer = await commit('checkpoint 2 (the new holder, counted)', row1);
      const mine = await commit('checkpoint 2 (the old holder, fenced)', row1);
      await git(a.repo, 'push', '-q', hosts.remoteUrl, `${killed}:${ref}`);
      let checks = 0;
      const pusher = new RemotePusher({
        cwd: a.repo,
        remote: hosts.remoteUrl,
        branch,
        notesRef: `refs/notes/echodo-runs/acme/${branch}`,
        assertHeld: async () => {
          if (++checks > 1) throw new LeaseLostError('lease epoch is no longer current');
          // The check passes (the epoch was still ours), then the takeover and the new holder's push.
          await git(a.repo, 'push', '-q', '--force', hosts.remoteUrl, `${newer}:${ref}`);
        },
        log: createLogger({ level: 'silent' }),
      });
      await assert.rejects(pusher.pushCheckpoint(mine), LeaseLostError);
      assert.equal(
        await git(hosts.remoteDir, 'rev-parse', ref),
        newer,
        'the counted checkpoint stays on the remote branch',
      );
      assert.equal(checks, 2, 'the lease was checked again after the refused force');
    },
  );
});
