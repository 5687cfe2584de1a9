// Many hosts: two "hosts" on this machine (separate clones as WORKER_REPO_ROOT,
// separate worktree bases, distinct WORKER_HOST_IDs) and one bare remote served by a real
// `git daemon` on 127.0.0.1. A worker on host A is SIGKILLed mid-brief; a worker on host B
// resumes the run by fetching its checkpoints from the remote (never cloning) and finishes it.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, realpath, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { parseConfig } from '../core/config.ts';
import { verifyChain } from '../core/checkpoint-hash.ts';
import { objectStoreBytes, runNotesRef } from '../worker/remote/push.ts';
import { checkRunIntegrity } from '../operator/integrity.ts';
import { waitFor, type Child } from './support/child.ts';
import { startGitDaemon, type GitDaemon } from '../testbed/git-daemon.ts';
import { git } from './support/git.ts';
import { workerMetricsPort } from './support/metrics.ts';
import { finishWith, moveOn, NO_STANDBY } from './support/hosts.ts';
import { createScenario, sampleSteps, type Scenario, type TranscriptStep } from './support/scenario.ts';

const ROUNDS = 6;
let s: Scenario;
let daemon: GitDaemon;
let root: string;
let remoteDir: string;
let remoteUrl: string;
let baselineTree: string;
type Host = 'a' | 'b' | 'c';
const hosts: Record<Host, { repo: string; env: Record<string, string> }> = {} as never;
const workers: Child[] = [];

function spawnOn(host: Host, extra: Record<string, string> = {}): Child {
  const w = s.spawnWorker({ ...hosts[host].env, ...extra });
  workers.push(w);
  return w;
}

/** Jobs leave repoPath out: each host serves them from its own WORKER_REPO_ROOT. */
const dispatch = (overrides: Record<string, unknown> = {}) => s.dispatch({ repoPath: undefined, ...overrides });

const finishOn = (host: Host, agentRunId: string) => finishWith(s, spawnOn(host), agentRunId);

/** The run's final state, as seen on host `host` and on the remote. */
async function assertFinished(agentRunId: string, host: Host) {
  const run = await s.run(agentRunId);
  assert.equal(run.status, 'completed', `run ${agentRunId}: ${run.failure_reason ?? ''}`);
  assert.equal(run.host_id, `host-${host}`, 'the run records the host that holds its worktree');
  const repo = hosts[host].repo;
  assert.equal(
    await git(repo, 'rev-parse', `refs/heads/${run.branch}^{tree}`),
    baselineTree,
    'same final tree as an uncrashed run',
  );
  assert.equal(
    await git(remoteDir, 'rev-parse', `refs/heads/${run.branch}^{tree}`),
    baselineTree,
    'the remote branch holds the final tree',
  );
  const rows = await s.checkpoints(agentRunId);
  assert.deepEqual(
    rows.map((r) => r.checkpoint_seq),
    Array.from({ length: ROUNDS }, (_, i) => i + 1),
    'seqs 1..n without gaps',
  );
  assert.ok(verifyChain(rows as never).ok, 'hash chain verifies');
  const notesRef = runNotesRef(s.workspaceId, agentRunId);
  for (const row of rows) {
    await git(remoteDir, 'cat-file', '-e', `${row.commit_oid}^{commit}`); // every row's commit is on the remote
    const note = JSON.parse(await git(remoteDir, 'notes', `--ref=${notesRef}`, 'show', row.commit_oid));
    assert.equal(note.checkpointSeq, row.checkpoint_seq, `remote note of seq ${row.checkpoint_seq}`);
    assert.equal(note.hash, row.hash);
  }
  const config = parseConfig({ ...s.env, ...hosts[host].env });
  const report = await checkRunIntegrity(s.t.db, config, s.workspaceId, agentRunId);
  assert.deepEqual(report?.findings, [], `integrity on host ${host}`);
  return { run, rows };
}

const hostA = () => hosts.a.repo;

/** A run of `steps` on host B; the remote is stopped once its second checkpoint is written. */
async function stopRemoteAfterSecondCheckpoint(
  name: string,
  steps: TranscriptStep[],
): Promise<{ agentRunId: string; w: Child; stoppedAt: number }> {
  const transcript = path.join(root, name);
  await writeFile(transcript, JSON.stringify({ steps }));
  const { agentRunId } = await dispatch({ model: `replay:${transcript}` });
  const w = spawnOn('b');
  await w.waitForLine(/"seq":2,.*"checkpoint written"|"checkpoint written".*"seq":2/, { timeoutMs: 120_000 });
  await daemon.stop();
  return { agentRunId, w, stoppedAt: Date.now() };
}

before(async () => {
  // Enough content that a clone is clearly bigger than what a resume fetches.
  const files = {
    'README.md': '# sample\n',
    'src/index.ts': 'export const answer = 42;\n',
    'vendor/data.txt': randomBytes(240_000).toString('base64'),
  };
  s = await createScenario({
    files,
    steps: sampleSteps(40, ROUNDS),
    env: { WORKER_LEASE_MS: '8000', WORKER_HEARTBEAT_MS: '500' },
  });
  root = await realpath(await mkdtemp(path.join(os.tmpdir(), 'echodo-hosts-')));
  remoteDir = path.join(root, 'remote.git');
  await git(root, 'clone', '-q', '--bare', s.repo, remoteDir);
  await git(remoteDir, 'config', 'uploadpack.allowFilter', 'true'); // so host C's clone really is partial
  daemon = await startGitDaemon(root);
  remoteUrl = daemon.url('remote.git');
  for (const host of ['a', 'b'] as const) {
    const repo = path.join(root, `host-${host}`);
    await git(root, 'clone', '-q', remoteUrl, repo); // over the real transport
    hosts[host] = {
      repo,
      env: {
        WORKER_REPO_ROOT: repo,
        WORKER_WORKTREE_BASE: path.join(root, `worktrees-${host}`),
        WORKER_HOST_ID: `host-${host}`,
        WORKER_CHECKPOINT_REMOTE: remoteUrl,
        ...NO_STANDBY,
      },
    };
  }
  await moveOn({ root, remoteUrl }, hostA(), 100);
  // Host C has no copy of the repository at all.
  hosts.c = {
    repo: path.join(root, 'host-c', 'repo'),
    env: {
      WORKER_REPO_ROOT: path.join(root, 'host-c', 'repo'),
      WORKER_WORKTREE_BASE: path.join(root, 'worktrees-c'),
      WORKER_HOST_ID: 'host-c',
      WORKER_CHECKPOINT_REMOTE: remoteUrl,
      ...NO_STANDBY,
    },
  };
  // The uncrashed run, on host A: its tree is the reference for every resumed run.
  const { agentRunId } = await dispatch();
  const w = spawnOn('a');
  await s.waitForStatus(agentRunId, 'completed', 120_000);
  await w.stop('SIGTERM', 8000);
  const run = await s.run(agentRunId);
  baselineTree = await git(hosts.a.repo, 'rev-parse', `refs/heads/${run.branch}^{tree}`);
  await assertFinished(agentRunId, 'a');
});

after(async () => {
  await Promise.all(workers.map((w) => w.stop('SIGKILL', 100)));
  await daemon?.stop();
  await s?.close();
});

describe('many hosts: the checkpoint remote', () => {
  test(
    'a worker on host A killed mid-brief; host B, 100 commits behind, resumes by fetching, never cloning',
    { timeout: 300_000 },
    async () => {
      const { agentRunId } = await dispatch();
      // A short lease for the victim: the stall detector hands the run on soon after the kill.
      // Before the 4th round's tool: checkpoints 1-3 have counted (pushed, then their rows), the
      // last of them behind the model's call for round 4.
      const victim = spawnOn('a', {
        ECHODO_FAULT: 'before-tool-call@4',
        WORKER_LEASE_MS: '3000',
        WORKER_HEARTBEAT_MS: '300',
      });
      assert.equal((await victim.exited).signal, 'SIGKILL', 'host A worker killed at its fault point');
      const before = await s.checkpoints(agentRunId);
      assert.equal(before.length, 3, 'three checkpoints written on host A');
      const base = (await s.run(agentRunId)).base_oid;
      assert.equal(
        await git(hosts.b.repo, 'rev-list', '--count', `main..${base}`).catch(() => 'missing'),
        'missing',
        "host B lacks the run's base",
      );
      assert.equal(
        await git(remoteDir, 'rev-list', '--count', `${await git(hosts.b.repo, 'rev-parse', 'main')}..${base}`),
        '100',
        'host B is 100 commits behind',
      );
      const metrics = await workerMetricsPort();
      let resumes: Record<string, string> = {};
      await finishWith(s, spawnOn('b', metrics.env), agentRunId, async () => {
        resumes = (await metrics.scrape()).byLabel('echodo_resumes_total', 'kind');
      });
      await assertFinished(agentRunId, 'b');
      assert.deepEqual(resumes, { remote: '1' }, "host B's worker counted one resume, fetched from the remote");

      const [resumed] = await s.events(agentRunId, 'run_resumed');
      assert.ok(resumed, 'run_resumed recorded');
      const m = resumed.metadata;
      assert.equal(m.fromHost, 'host-a');
      assert.equal(m.toHost, 'host-b');
      assert.equal(m.recloned, false);
      assert.equal(m.fromSeq, 3);
      // Fetched at the claim onto a scratch ref (before the branch's ownership was checked), then moved.
      assert.equal(
        await git(hosts.b.repo, 'for-each-ref', 'refs/echodo-prefetch/'),
        '',
        'no scratch ref left on host B',
      );
      // What B fetched: the run's checkpoint objects only, far below a clone of the remote.
      const cloneDir = path.join(root, `clone-${agentRunId}`);
      await git(root, 'clone', '-q', '--bare', '--no-local', remoteUrl, cloneDir);
      const cloneBytes = await objectStoreBytes(cloneDir);
      assert.ok(
        m.fetchedBytes > 0 && m.fetchedBytes * 10 < cloneBytes,
        `fetched ${m.fetchedBytes} bytes, a clone is ${cloneBytes}`,
      );
      console.log(
        `cross-host resume fetched ${m.fetchedBytes} bytes; a full clone of the remote is ${cloneBytes} bytes`,
      );
      // `git log --notes` on a fresh clone that fetched the run's notes ref shows every checkpoint.
      const notesRef = runNotesRef(s.workspaceId, agentRunId);
      await git(cloneDir, 'fetch', '-q', remoteUrl, `${notesRef}:${notesRef}`);
      const run = await s.run(agentRunId);
      const log = await git(cloneDir, 'log', `--notes=${notesRef}`, '--format=%N', `refs/heads/${run.branch}`);
      assert.equal(log.split('\n').filter((l) => l.includes('"checkpointSeq"')).length, ROUNDS);
    },
  );

  // Killed before the push, after the push (before the row), after the row (before its note).
  for (const [point, rowsLeft] of [
    ['before-push@3', 2],
    ['after-push@3', 2],
    ['after-checkpoint-row@3', 3],
  ] as const) {
    test(
      `killed at ${point}: resumed on the other host with no lost or duplicated checkpoint`,
      { timeout: 300_000 },
      async () => {
        const { agentRunId } = await dispatch();
        const victim = spawnOn('a', { ECHODO_FAULT: point, WORKER_LEASE_MS: '3000', WORKER_HEARTBEAT_MS: '300' });
        assert.equal((await victim.exited).signal, 'SIGKILL', `killed at ${point}`);
        assert.equal((await s.checkpoints(agentRunId)).length, rowsLeft, 'checkpoints that counted before the kill');
        await finishOn('b', agentRunId);
        await assertFinished(agentRunId, 'b');
        const [resumed] = await s.events(agentRunId, 'run_resumed');
        assert.equal(resumed?.metadata.fromHost, 'host-a');
        assert.equal(resumed?.metadata.fromSeq, rowsLeft);
      },
    );
  }

  test('a host with no repository at all resumes the run from a partial clone', { timeout: 300_000 }, async () => {
    const { agentRunId } = await dispatch();
    const victim = spawnOn('a', {
      ECHODO_FAULT: 'during-model-call@3',
      WORKER_LEASE_MS: '3000',
      WORKER_HEARTBEAT_MS: '300',
    });
    assert.equal((await victim.exited).signal, 'SIGKILL');
    await finishOn('c', agentRunId);
    await assertFinished(agentRunId, 'c');
    const [resumed] = await s.events(agentRunId, 'run_resumed');
    assert.equal(resumed?.metadata.fromHost, 'host-a');
    assert.equal(resumed?.metadata.toHost, 'host-c');
    assert.equal(resumed?.metadata.partialClone, true);
    assert.equal(resumed?.metadata.recloned, false);
    assert.equal(await git(hosts.c.repo, 'config', 'remote.origin.partialclonefilter'), 'blob:none');
    // Really partial: the blobs of main's history that no checkout needed were never fetched.
    assert.match(
      await git(hosts.c.repo, 'rev-list', '--objects', '--missing=print', 'refs/remotes/origin/main'),
      /^\?[0-9a-f]{40}$/m,
    );
  });

  test(
    'a run cancelled while its host was dead ends on the other host, leaving no prefetched ref behind',
    { timeout: 300_000 },
    async () => {
      const { agentRunId } = await dispatch();
      const victim = spawnOn('a', {
        ECHODO_FAULT: 'during-model-call@3',
        WORKER_LEASE_MS: '3000',
        WORKER_HEARTBEAT_MS: '300',
      });
      assert.equal((await victim.exited).signal, 'SIGKILL');
      // Asked while nobody could act on it: the next worker to claim the run, on host B, cancels it
      // before any worktree, while its fetch of the run's checkpoints (started at the claim) runs.
      await s.su`update agent_runs set cancel_requested_at = now(), cancel_requested_by = 'operator' where id = ${agentRunId}`;
      const wb = spawnOn('b');
      await waitFor(async () => (await s.sweep(), (await s.run(agentRunId)).status === 'cancelled'), {
        timeoutMs: 120_000,
        intervalMs: 200,
      });
      // Host B's worker stays up well past its fetch (~0.1 s here), which outlives the cancel.
      await new Promise((r) => setTimeout(r, 2000));
      const left = await git(hosts.b.repo, 'for-each-ref', 'refs/echodo-prefetch/');
      await wb.stop('SIGTERM', 8000);
      assert.equal(left, '', "the prefetch's scratch ref is gone");
      assert.ok(
        wb.lines.some((l) => l.includes('run cancelled')),
        'host B cancelled it',
      );
    },
  );

  test(
    "a push failing behind the round stops the run at once, interrupting the model's call",
    { timeout: 300_000 },
    async () => {
      // Checkpoint 3's push runs during the model's 4th call, which would take 20 s: the refused push
      // must stop the run and release it well before that call could answer.
      const steps = sampleSteps(300, ROUNDS);
      steps[3] = { ...steps[3]!, delayMs: 20_000 };
      const { agentRunId, w } = await stopRemoteAfterSecondCheckpoint('long-fourth-call.json', steps);
      try {
        await w.waitForLine(/checkpoint remote unavailable; releasing the run/, { timeoutMs: 12_000 });
        const rows = await s.checkpoints(agentRunId);
        assert.deepEqual(
          rows.map((r) => r.checkpoint_seq),
          [1, 2],
          'checkpoint 3 never counted',
        );
        assert.ok(
          !w.lines.some((l) => l.includes('"tool round done"') && l.includes('"step":4')),
          'no tool of round 4 ran',
        );
      } finally {
        await daemon.start();
      }
      await s.waitForStatus(agentRunId, 'completed', 180_000);
      await w.stop('SIGTERM', 8000);
      await assertFinished(agentRunId, 'b');
    },
  );

  test(
    'the remote stopped for 10 s mid-run: released at its last checkpoint, completed once it is back',
    { timeout: 300_000 },
    async () => {
      // The same rounds, slower, so the outage lands inside the run.
      const { agentRunId, w, stoppedAt } = await stopRemoteAfterSecondCheckpoint('slow.json', sampleSteps(700, ROUNDS));
      try {
        await w.waitForLine(/checkpoint remote unavailable; releasing the run/, { timeoutMs: 60_000 });
        const during = await s.checkpoints(agentRunId);
        // Nothing un-checkpointed counted: every row's commit is on the (stopped) remote's disk.
        for (const row of during) await git(remoteDir, 'cat-file', '-e', `${row.commit_oid}^{commit}`);
        assert.notEqual((await s.run(agentRunId)).status, 'completed');
        await new Promise((r) => setTimeout(r, Math.max(0, stoppedAt + 10_000 - Date.now())));
        assert.notEqual((await s.run(agentRunId)).status, 'completed', 'nothing completes while the remote is down');
        for (const row of await s.checkpoints(agentRunId))
          await git(remoteDir, 'cat-file', '-e', `${row.commit_oid}^{commit}`);
      } finally {
        await daemon.start();
      }
      await s.waitForStatus(agentRunId, 'completed', 180_000);
      await w.stop('SIGTERM', 8000);
      await assertFinished(agentRunId, 'b');
    },
  );
});
