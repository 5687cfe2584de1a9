// A checkpoint remote that hangs instead of refusing: it accepts connections and never answers (a
// stalled server, a partition that drops packets). Between the worker and a real `git daemon` sits
// a TCP relay that can turn into such a black hole. Without a limit, the push holds the run for good
// while its lease keeps heartbeating, so no other worker ever takes it. With WORKER_REMOTE_TIMEOUT_MS
// the push is stopped, the run is released at its last checkpoint, and it completes once the remote
// answers again.
import assert from 'node:assert/strict';
import { mkdtemp, realpath } from 'node:fs/promises';
import { connect, createServer, type Server, type Socket } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import type { Child } from './support/child.ts';
import { startGitDaemon, type GitDaemon } from '../testbed/git-daemon.ts';
import { git } from './support/git.ts';
import { createScenario, sampleSteps, type Scenario } from './support/scenario.ts';

const ROUNDS = 6;
const TIMEOUT_MS = 1500;
let s: Scenario;
let daemon: GitDaemon;
let remoteDir: string;
let relay: { port: number; hang(on: boolean): void; close(): Promise<void> };
const workers: Child[] = [];

/** A TCP relay to `port`; while hanging, it accepts connections and holds them silently. */
async function startRelay(port: number): Promise<typeof relay> {
  let hanging = false;
  const held = new Set<Socket>();
  const server: Server = createServer((client) => {
    held.add(client);
    client.on('close', () => held.delete(client));
    client.on('error', () => {});
    if (hanging) return; // accepted, never answered
    const upstream = connect(port, '127.0.0.1');
    upstream.on('error', () => client.destroy());
    client.on('close', () => upstream.destroy());
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as { port: number }).port,
    hang(on) {
      hanging = on;
      if (!on) for (const socket of held) socket.destroy();
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of held) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

before(async () => {
  s = await createScenario({
    steps: sampleSteps(700, ROUNDS),
    env: { WORKER_LEASE_MS: '8000', WORKER_HEARTBEAT_MS: '500' },
  });
  const root = await realpath(await mkdtemp(path.join(os.tmpdir(), 'echodo-remote-hang-')));
  remoteDir = path.join(root, 'remote.git');
  await git(root, 'clone', '-q', '--bare', s.repo, remoteDir);
  daemon = await startGitDaemon(root);
  relay = await startRelay(daemon.port);
});

after(async () => {
  await Promise.all(workers.map((w) => w.stop('SIGKILL', 100)));
  await relay?.close();
  await daemon?.stop();
  await s?.close();
});

test(
  'a remote that stops answering mid-run: the push is stopped after WORKER_REMOTE_TIMEOUT_MS, the run released at its last checkpoint, completed once it answers',
  { timeout: 300_000 },
  async () => {
    const { agentRunId } = await s.dispatch();
    const w = s.spawnWorker({
      WORKER_CHECKPOINT_REMOTE: `git://127.0.0.1:${relay.port}/remote.git`,
      WORKER_REMOTE_TIMEOUT_MS: String(TIMEOUT_MS),
    });
    workers.push(w);
    await w.waitForLine(/"seq":2,.*"checkpoint written"|"checkpoint written".*"seq":2/, { timeoutMs: 120_000 });
    relay.hang(true);
    const hungAt = Date.now();
    try {
      const released = await w.waitForLine(/checkpoint remote unavailable; releasing the run/, { timeoutMs: 60_000 });
      assert.match(
        released,
        new RegExp(`no answer within ${TIMEOUT_MS} ms`),
        'released because git was stopped, not refused',
      );
      assert.ok(Date.now() - hungAt >= TIMEOUT_MS, 'not before the limit');
      assert.notEqual((await s.run(agentRunId)).status, 'completed');
      // Nothing un-checkpointed counted: every row's commit reached the remote before it hung.
      for (const row of await s.checkpoints(agentRunId))
        await git(remoteDir, 'cat-file', '-e', `${row.commit_oid}^{commit}`);
    } finally {
      relay.hang(false);
    }
    await s.waitForStatus(agentRunId, 'completed', 180_000);
    await w.stop('SIGTERM', 8000);
    const rows = await s.checkpoints(agentRunId);
    assert.deepEqual(
      rows.map((r) => r.checkpoint_seq),
      Array.from({ length: ROUNDS }, (_, i) => i + 1),
      'seqs 1..n without gaps',
    );
    for (const row of rows) await git(remoteDir, 'cat-file', '-e', `${row.commit_oid}^{commit}`);
  },
);
