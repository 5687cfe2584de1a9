// The remote standby (worker/remote/standby.ts): a host keeps the latest checkpoint of each run
// another host holds fetched ahead, so taking the run over fetches nothing. Two hosts on this
// machine and a bare remote behind a real `git daemon`; host A's worker is SIGKILLed mid-brief.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { parseConfig } from '../core/config.ts';
import { waitFor, type Child } from './support/child.ts';
import { git } from './support/git.ts';
import { workerMetricsPort } from './support/metrics.ts';
import {
  assertFinishedOnRemote,
  dispatchToHosts,
  setUpHosts,
  spawnOnHost,
  stopProcesses,
  type Host,
  type Hosts,
} from './support/hosts.ts';
import { createScenario, sampleSteps, type Scenario } from './support/scenario.ts';
import { readdir, readFile, realpath } from 'node:fs/promises';
import path from 'node:path';
import { pickAim, readStandby, standbyRefs } from '../worker/remote/standby.ts';
import type { StandbyRun } from '../store/standby.ts';

const ROUNDS = 6;
const VICTIM = { ECHODO_FAULT: 'before-tool-call@4', WORKER_LEASE_MS: '3000', WORKER_HEARTBEAT_MS: '300' };
let s: Scenario;
let hosts: Hosts;
let baselineTree: string;
let baselineRunId: string;
const children: Child[] = [];

const spawnOn = (host: Host, extra: Record<string, string> = {}) => spawnOnHost(s, children, host, extra);
const dispatch = () => dispatchToHosts(s);

/** Host A's worker runs the brief until its fault point kills it after checkpoint 3. */
async function killedOnA(): Promise<{ agentRunId: string; rows: Record<string, any>[] }> {
  const { agentRunId } = await dispatch();
  const victim = spawnOn(hosts.byName.a!, VICTIM);
  assert.equal((await victim.exited).signal, 'SIGKILL', 'host A worker killed at its fault point');
  const rows = await s.checkpoints(agentRunId);
  assert.equal(rows.length, 3, 'three checkpoints written on host A');
  return { agentRunId, rows };
}

/** Sweeps (as the stall detector would) until the run is over. */
async function sweepUntilFinished(agentRunId: string, w: Child): Promise<void> {
  await waitFor(
    async () => {
      await s.sweep();
      const { status } = await s.run(agentRunId);
      return status === 'completed' || status === 'failed';
    },
    { timeoutMs: 180_000, intervalMs: 200 },
  ).catch((err) => assert.fail(`${(err as Error).message}\n${w.lines.slice(-30).join('\n')}`));
}

/** Host B's standby fetches checkpoint `latest` while dead host A holds the run; B takes it over from it. */
async function checkTakeOver(b: Host, wb: Child, agentRunId: string, latest: string): Promise<void> {
  const run = await s.run(agentRunId);
  const refs = standbyRefs(s.workspaceId, agentRunId);
  const held = async () => (await git(b.repo, 'rev-parse', '--verify', '-q', refs.branch).catch(() => '')) === latest;
  await waitFor(held, { timeoutMs: 60_000, intervalMs: 100 }).catch(() =>
    assert.fail(`host B's standby never fetched ${latest}\n${wb.lines.slice(-20).join('\n')}`),
  );
  // Onto its own refs only: the run's branch is set by whoever resumes it, after its ownership check.
  assert.equal(
    await git(b.repo, 'rev-parse', '--verify', '-q', `refs/heads/${run.branch}`).catch(() => 'absent'),
    'absent',
  );
  assert.match(await standbyHeld(b), new RegExp(`^${refs.notes} [0-9a-f]{40}$`, 'm'), "the run's notes are held too");

  // The run looks abandoned (its lease unrenewed): host B's spare worktree is aimed at its checkpoint.
  await waitFor(async () => (await aimsOn(b)).includes(latest), { timeoutMs: 60_000, intervalMs: 100 }).catch(
    async () =>
      assert.fail(
        `host B's spare was never aimed at ${latest} (aims: ${await aimsOn(b)})\n${wb.lines.slice(-20).join('\n')}`,
      ),
  );

  await sweepUntilFinished(agentRunId, wb);
  await assertFinishedOnRemote(s, hosts, agentRunId, ROUNDS, baselineTree);
  const [resumed] = await s.events(agentRunId, 'run_resumed');
  const { fromHost, toHost, fromSeq, standby, fetchedBytes, aimedSpare } = resumed?.metadata ?? {};
  assert.deepEqual(
    { fromHost, toHost, fromSeq, standby, fetchedBytes, aimedSpare },
    { fromHost: 'host-a', toHost: 'host-b', fromSeq: 3, standby: true, fetchedBytes: 0, aimedSpare: true },
    `resumed from what the standby held, with no fetch, into the spare already checked out at the checkpoint\n${wb.lines.slice(-40).join('\n')}`,
  );
  // The run is host B's now and then finished: nothing of it stays held.
  await waitFor(async () => (await standbyHeld(b)) === '', { timeoutMs: 30_000, intervalMs: 100 }).catch(async () =>
    assert.fail(`standby refs left on host B: ${await standbyHeld(b)}`),
  );
}

/** The commits the spares of the host's repository are aimed at (spare-worktrees.ts AIM_MARK). */
async function aimsOn(host: Host): Promise<string[]> {
  const admins = path.join(host.repo, '.git', 'worktrees');
  const names = await readdir(admins).catch(() => [] as string[]);
  const aims = await Promise.all(
    names.map((name) => readFile(path.join(admins, name, 'echodo-aimed'), 'utf8').catch(() => '')),
  );
  return aims.map((aim) => aim.trim()).filter(Boolean);
}

const standbyHeld = (host: Host) =>
  git(host.repo, 'for-each-ref', '--format=%(refname) %(objectname)', 'refs/echodo-standby/');

before(async () => {
  s = await createScenario({
    steps: sampleSteps(40, ROUNDS),
    env: { WORKER_LEASE_MS: '8000', WORKER_HEARTBEAT_MS: '500' },
  });
  hosts = await setUpHosts(s, ['a', 'b']);
  // The uncrashed run, on host A: its tree is the reference for every resumed run.
  const { agentRunId } = await dispatch();
  const w = spawnOn(hosts.byName.a!);
  await s.waitForStatus(agentRunId, 'completed', 120_000);
  await w.stop('SIGTERM', 8000);
  const run = await s.run(agentRunId);
  baselineRunId = agentRunId;
  baselineTree = await git(hosts.byName.a!.repo, 'rev-parse', `refs/heads/${run.branch}^{tree}`);
});

after(async () => {
  await stopProcesses(children);
  await hosts?.close();
  await s?.close();
});

describe('the remote standby', () => {
  test(
    "host B holds the dead host's last checkpoint before the take-over, which then fetches nothing",
    { timeout: 300_000 },
    async () => {
      const b = hosts.byName.b!;
      const { agentRunId, rows } = await killedOnA();
      // Host B's worker is up while the run is still held by dead host A (its lease not yet swept).
      const metrics = await workerMetricsPort();
      const wb = spawnOn(b, { WORKER_REMOTE_STANDBY_MS: '200', ...metrics.env });
      try {
        await checkTakeOver(b, wb, agentRunId, rows[2]!.commit_oid);
        // One resume, into the spare the standby aimed: counted as that, not as a fetch from the remote.
        assert.deepEqual((await metrics.scrape()).byLabel('echodo_resumes_total', 'kind'), { spare: '1' });
      } finally {
        await wb.stop('SIGTERM', 8000); // a failed check leaves no worker to take the next test's run
      }
    },
  );

  test('a standby behind the latest checkpoint is not used: the take-over fetches', { timeout: 300_000 }, async () => {
    const b = hosts.byName.b!;
    const { agentRunId, rows } = await killedOnA();
    // What a standby that last swept after checkpoint 2 holds.
    const refs = standbyRefs(s.workspaceId, agentRunId);
    await git(b.repo, 'fetch', '-q', hosts.remoteUrl, `+${rows[1]!.commit_oid}:${refs.branch}`);
    // Its next sweep is far off: the take-over meets the lagging copy.
    const wb = spawnOn(b, { WORKER_REMOTE_STANDBY_MS: '600000' });
    try {
      await sweepUntilFinished(agentRunId, wb);
    } finally {
      await wb.stop('SIGTERM', 8000);
    }
    await assertFinishedOnRemote(s, hosts, agentRunId, ROUNDS, baselineTree);
    const [resumed] = await s.events(agentRunId, 'run_resumed');
    assert.equal(resumed?.metadata.fromSeq, 3);
    assert.equal(resumed?.metadata.standby, undefined, 'not resumed from the standby');
    assert.ok(resumed?.metadata.fetchedBytes > 0, `fetched at the take-over: ${resumed?.metadata.fetchedBytes} bytes`);
  });

  test(
    "the standby's copy moves the run's branch only once it is the run's own on this host",
    { timeout: 300_000 },
    async () => {
      const b = hosts.byName.b!;
      const { agentRunId, rows } = await killedOnA();
      const { branch } = await s.run(agentRunId);
      // On host B's repository, the branch's name is another run's (a claim each repository keeps).
      await s.su`insert into branch_claims (repo_dir, branch, workspace_id, agent_run_id)
      values (${await realpath(path.join(b.repo, '.git'))}, ${branch}, ${s.workspaceId}, ${baselineRunId})`;
      const wb = spawnOn(b, { WORKER_REMOTE_STANDBY_MS: '200' });
      try {
        const refs = standbyRefs(s.workspaceId, agentRunId);
        await waitFor(
          async () =>
            (await git(b.repo, 'rev-parse', '--verify', '-q', refs.branch).catch(() => '')) === rows[2]!.commit_oid,
          { timeoutMs: 60_000, intervalMs: 100 },
        );
        await sweepUntilFinished(agentRunId, wb);
      } finally {
        await wb.stop('SIGTERM', 8000);
      }
      const run = await s.run(agentRunId);
      assert.equal(run.status, 'failed');
      assert.match(run.failure_reason, /ref_refused: branch .* belongs to another run/);
      // The refusal came before the move: the standby's copy never reached the branch on host B.
      assert.equal(
        await git(b.repo, 'rev-parse', '--verify', '-q', `refs/heads/${branch}`).catch(() => 'absent'),
        'absent',
      );
    },
  );

  test('switched off, a worker lets go of what the standby held', { timeout: 120_000 }, async () => {
    const b = hosts.byName.b!;
    await git(b.repo, 'update-ref', 'refs/echodo-standby/branches/ws/gone-run', await git(b.repo, 'rev-parse', 'HEAD'));
    const wb = spawnOn(b, { WORKER_REMOTE_STANDBY_MS: '0' });
    try {
      await waitFor(async () => (await standbyHeld(b)) === '', { timeoutMs: 60_000, intervalMs: 100 }).catch(async () =>
        assert.fail(`standby refs left on host B: ${await standbyHeld(b)}`),
      );
    } finally {
      await wb.stop('SIGTERM', 8000);
    }
  });

  test('what the standby holds for a run is read as git reads it, loose or packed', async () => {
    const b = hosts.byName.b!;
    const refs = standbyRefs('ws-read', 'run-read');
    const [head, other] = (await git(b.repo, 'rev-parse', 'HEAD', 'HEAD^{tree}')).split('\n'); // two objects: refs need no commit
    assert.equal(await readStandby(b.repo, 'ws-read', 'run-read'), undefined, 'nothing held');
    await git(b.repo, 'update-ref', refs.branch, head!);
    assert.deepEqual(await readStandby(b.repo, 'ws-read', 'run-read'), { branch: head, notes: undefined });
    await git(b.repo, 'update-ref', refs.notes, other!);
    await git(b.repo, 'pack-refs', '--all');
    assert.deepEqual(
      await readStandby(b.repo, 'ws-read', 'run-read'),
      { branch: head, notes: other },
      'from packed-refs',
    );
    await git(b.repo, 'update-ref', refs.branch, other!); // loose again, over the packed one
    assert.deepEqual(await readStandby(b.repo, 'ws-read', 'run-read'), { branch: other, notes: other });
    await git(b.repo, 'update-ref', '-d', refs.branch);
    await git(b.repo, 'update-ref', '-d', refs.notes);
    assert.equal(await readStandby(b.repo, 'ws-read', 'run-read'), undefined, 'let go');
  });

  test('the spare is aimed at the run likeliest to be taken over: queued first, then the most overdue lease', () => {
    const run = (id: string, status: 'running' | 'queued', leftMs: number | null): StandbyRun => ({
      workspace_id: 'ws',
      agent_run_id: id,
      branch: `b-${id}`,
      commit_oid: id.padEnd(40, '0'),
      status,
      lease_left_ms: leftMs,
    });
    const overdue = 6000; // WORKER_LEASE_MS 10 s less two 2 s heartbeats
    assert.equal(
      pickAim([run('fresh', 'running', 9500), run('renewed', 'running', 7000)], overdue),
      undefined,
      'every lease renewed: none',
    );
    assert.equal(
      pickAim([run('late', 'running', 5000), run('later', 'running', -200), run('fresh', 'running', 9000)], overdue)
        ?.agent_run_id,
      'later',
    );
    assert.equal(
      pickAim([run('later', 'running', -200), run('released', 'queued', null)], overdue)?.agent_run_id,
      'released',
    );
    assert.equal(pickAim([], overdue), undefined);
  });

  test('WORKER_REMOTE_STANDBY_MS is 0 or at least 100 ms', () => {
    assert.throws(
      () => parseConfig({ ...s.env, WORKER_REMOTE_STANDBY_MS: '50' }),
      /WORKER_REMOTE_STANDBY_MS: must be 0 \(off\) or at least 100/,
    );
    assert.equal(parseConfig({ ...s.env, WORKER_REMOTE_STANDBY_MS: '0' }).WORKER_REMOTE_STANDBY_MS, 0);
    assert.equal(parseConfig({ ...s.env }).WORKER_REMOTE_STANDBY_MS, 2000);
  });
});
