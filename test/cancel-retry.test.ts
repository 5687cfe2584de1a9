// Cancel (and retry) from the command line, with real worker processes: a live run stops at its
// next tool boundary with its last checkpoint intact and its worktree released; a queued run,
// or one whose worker was SIGKILLed, is cancelled at once; a finished run is refused.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { spawnNode, waitFor, type Child } from './support/child.ts';
import { createScenario, type Scenario, type TranscriptStep } from './support/scenario.ts';

// Two quick rounds, then the model "thinks" for a minute: a cancel lands while the run is alive,
// however slow the machine. The rounds after it never happen.
const write = (i: number, delayMs: number): TranscriptStep => ({
  toolCalls: [{ toolName: 'write_file', input: { path: `src/step-${i}.ts`, content: `export const step = ${i};\n` } }],
  delayMs,
});
const STEPS: TranscriptStep[] = [
  write(1, 20),
  write(2, 20),
  write(3, 120_000),
  write(4, 20),
  write(5, 20),
  write(6, 20),
  { text: 'Done.' },
];
const QUICK: TranscriptStep[] = [write(1, 0), { text: 'Done.' }];

let s: Scenario;
let quickModel: string;
before(async () => {
  // An 8 s lease: a loaded machine can miss a 2 s one, and the worker would stop itself.
  s = await createScenario({
    steps: STEPS,
    env: { WORKER_MAX_TOOL_STEPS: '30', WORKER_LEASE_MS: '8000', WORKER_HEARTBEAT_MS: '400' },
  });
  const quick = path.join(path.dirname(s.transcriptPath), 'quick.json');
  await writeFile(quick, JSON.stringify({ steps: QUICK }));
  quickModel = `replay:${quick}`;
});
after(async () => s?.close());

async function cli(
  script: string,
  args: string[],
): Promise<{ code: number | null; out: Record<string, any> | undefined; err: string }> {
  const child = spawnNode(script, args, { env: s.env });
  const { code } = await child.exited;
  const line = child.stdout.find((l) => l.startsWith('{'));
  return { code, out: line ? JSON.parse(line) : undefined, err: child.stderr.join('\n') };
}

const cancelCli = (agentRunId: string) => cli('scripts/cancel.ts', ['--workspace', s.workspaceId, '--run', agentRunId]);

async function waitForCheckpoint(agentRunId: string, seq: number, worker?: Child) {
  await waitFor(async () => (await s.checkpoints(agentRunId)).length >= seq, {
    timeoutMs: 120_000,
    what: `checkpoint ${seq} of ${agentRunId}`,
  }).catch((err: Error) => {
    throw new Error(`${err.message}\nworker output:\n${worker?.output() ?? ''}`);
  });
}

test('cancel of a running run: the worker stops at its next tool boundary, checkpointed, worktree released', async () => {
  const worker = s.spawnWorker();
  try {
    const { agentRunId } = await s.dispatch();
    await waitForCheckpoint(agentRunId, 2, worker);
    const { code, out, err } = await cancelCli(agentRunId);
    assert.equal(code, 0, err);
    assert.equal(out!.immediate, false, 'a live worker finishes the cancel itself');
    const run = await s.waitForStatus(agentRunId, 'cancelled', 120_000);
    assert.ok(run.finished_at, 'finished_at is set');
    assert.equal(run.cancel_requested_by, 'cli');
    const checkpoints = await s.checkpoints(agentRunId);
    assert.equal(checkpoints.length, 2, 'stopped during round 3: the model call is interrupted, nothing after it runs');
    assert.equal(run.step, checkpoints.at(-1)!.step, 'every round done is checkpointed');
    const [event] = await s.events(agentRunId, 'run_cancelled');
    assert.equal(event?.metadata.by, 'cli', 'run_cancelled says who asked');
    assert.equal(event?.metadata.lastSeq, checkpoints.at(-1)!.checkpoint_seq, 'and at which checkpoint it stopped');
    // The worker removes the worktree right after recording the cancel.
    await waitFor(() => !existsSync(run.worktree_path), { timeoutMs: 40_000, what: 'the worktree to be released' });
    // The branch holds the last checkpoint: integrity-check verifies it by branch and notes.
    const check = spawnNode('scripts/integrity-check.ts', ['--workspace', s.workspaceId, '--run', agentRunId], {
      env: s.env,
    });
    assert.equal((await check.exited).code, 0, check.output());
    // The worker goes on serving: the next job completes.
    const next = await s.dispatch({ model: quickModel });
    await s.waitForStatus(next.agentRunId, 'completed', 120_000);
  } finally {
    await worker.stop();
  }
});

test('cancel of a queued run takes effect at once; a second cancel answers the same; a worker never runs it', async () => {
  const { agentRunId } = await s.dispatch();
  const first = await cancelCli(agentRunId);
  assert.equal(first.code, 0, first.err);
  assert.deepEqual(
    { status: first.out!.status, immediate: first.out!.immediate },
    { status: 'cancelled', immediate: true },
  );
  const again = await cancelCli(agentRunId);
  assert.equal(again.code, 0, again.err);
  assert.equal(again.out!.status, 'cancelled');
  assert.equal((await s.events(agentRunId, 'run_cancelled')).length, 1, 'one run_cancelled event');
  const worker = s.spawnWorker();
  try {
    const other = await s.dispatch({ model: quickModel });
    await s.waitForStatus(other.agentRunId, 'completed', 120_000);
    assert.equal((await s.run(agentRunId)).status, 'cancelled', 'the queued job was dropped, not run');
    assert.equal((await s.checkpoints(agentRunId)).length, 0);
  } finally {
    await worker.stop();
  }
});

test('cancel of a run whose worker was SIGKILLed takes effect at once and fences the dead worker', async () => {
  const worker = s.spawnWorker();
  const { agentRunId } = await s.dispatch();
  await waitForCheckpoint(agentRunId, 1, worker);
  worker.kill('SIGKILL');
  await worker.exited;
  const before = await s.run(agentRunId);
  // Its lease runs out (2 s here); from then on nobody is working on the run.
  await waitFor(
    async () => (await s.su`select 1 from agent_runs where id = ${agentRunId} and lease_expires_at < now()`).length > 0,
    {
      timeoutMs: 40_000,
      what: "the dead worker's lease to expire",
    },
  );
  const { code, out, err } = await cancelCli(agentRunId);
  assert.equal(code, 0, err);
  assert.deepEqual({ status: out!.status, immediate: out!.immediate }, { status: 'cancelled', immediate: true });
  const run = await s.run(agentRunId);
  assert.equal(run.status, 'cancelled');
  assert.ok(run.lease_epoch > before.lease_epoch, 'the epoch moved: the dead worker is fenced off');
  const [event] = await s.events(agentRunId, 'run_cancelled');
  assert.match(event!.metadata.reason, /lease expired/);
  assert.equal((await s.sweep()).redispatched.includes(agentRunId), false, 'the stall detector leaves it alone');
});

test('a cancel asked while the worker lived is honoured by the next worker if that one died', async () => {
  const worker = s.spawnWorker({ ECHODO_FAULT: 'after-cancel-request' });
  const { agentRunId } = await s.dispatch();
  await waitForCheckpoint(agentRunId, 1, worker);
  const { out } = await cancelCli(agentRunId);
  assert.equal(out!.immediate, false);
  await worker.exited; // killed by the fault point: checkpointed, not yet marked cancelled
  assert.equal((await s.run(agentRunId)).status, 'running');
  await waitFor(
    async () => (await s.su`select 1 from agent_runs where id = ${agentRunId} and lease_expires_at < now()`).length > 0,
    {
      timeoutMs: 40_000,
      what: 'the lease to expire',
    },
  );
  await s.sweep(); // re-dispatched like any stalled run …
  const next = s.spawnWorker();
  try {
    const run = await s.waitForStatus(agentRunId, 'cancelled', 120_000); // … and cancelled on claim
    const checkpoints = await s.checkpoints(agentRunId);
    assert.equal(run.step, checkpoints.at(-1)!.step, 'no round after the cancel');
    assert.equal((await s.events(agentRunId, 'run_cancelled')).at(-1)!.metadata.by, 'cli');
  } finally {
    await next.stop();
  }
});

test('cancel of a finished run is refused (exit 3); of an unknown run, exit 2', async () => {
  const { agentRunId } = await s.dispatch();
  await s.su`update agent_runs set status = 'completed', finished_at = now() where id = ${agentRunId}`;
  const refused = await cancelCli(agentRunId);
  assert.equal(refused.code, 3, refused.err);
  assert.match(refused.err, /already completed/);
  const unknown = await cancelCli('no-such-run');
  assert.equal(unknown.code, 2, unknown.err);
  assert.match(unknown.err, /not found/);
});

test('retry from the command line: a run whose worker was SIGKILLed resumes from its last checkpoint and completes', async () => {
  const file = path.join(path.dirname(s.transcriptPath), 'retry.json');
  await writeFile(
    file,
    JSON.stringify({ steps: [write(1, 10), write(2, 10), write(3, 3000), write(4, 10), { text: 'Done.' }] }),
  );
  const worker = s.spawnWorker();
  const { agentRunId } = await s.dispatch({ model: `replay:${file}` });
  await waitForCheckpoint(agentRunId, 2, worker);
  worker.kill('SIGKILL');
  await worker.exited;
  const early = await cli('scripts/retry.ts', ['--workspace', s.workspaceId, '--run', agentRunId]);
  if (early.code === 3) assert.match(early.err, /live lease/, "refused only while the dead worker's lease still runs");
  let retried = early;
  if (early.code !== 0) {
    await waitFor(
      async () =>
        (await s.su`select 1 from agent_runs where id = ${agentRunId} and lease_expires_at < now()`).length > 0,
      {
        timeoutMs: 40_000,
        what: 'the lease to expire',
      },
    );
    retried = await cli('scripts/retry.ts', ['--workspace', s.workspaceId, '--run', agentRunId]);
  }
  assert.equal(retried.code, 0, retried.err);
  assert.equal(retried.out!.outcome, 'redispatched');
  const next = s.spawnWorker();
  try {
    const run = await s.waitForStatus(agentRunId, 'completed', 120_000);
    assert.equal(run.attempt, 2);
    assert.deepEqual(
      (await s.checkpoints(agentRunId)).map((c) => c.checkpoint_seq),
      [1, 2, 3, 4],
      'resumed after checkpoint 2',
    );
    assert.equal((await s.events(agentRunId, 'run_redispatched')).length, 1);
    const refused = await cli('scripts/retry.ts', ['--workspace', s.workspaceId, '--run', agentRunId]);
    assert.equal(refused.code, 3, 'a completed run is not retried');
  } finally {
    await next.stop();
  }
});
