// Fork from checkpoint N, with real workers, Postgres and git: the fork starts from N's commit
// on a branch of its own, its model continues after N's step, its chain is anchored on N's hash;
// the source is untouched. Rewind (--cancel-source) of a running run cancels the source at its
// next boundary while the fork goes on. Another workspace's run, a missing and a pruned
// checkpoint are refused with exit 2.
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { LAST_ROW, pruneRuns } from '../store/retention.ts';
import { createWorkspace } from '../store/runs.ts';
import { withWorkspace } from '../store/workspace.ts';
import { verifyChain } from '../core/checkpoint-hash.ts';
import { spawnNode, waitFor, type Child } from './support/child.ts';
import { git } from './support/git.ts';
import { createScenario, sampleSteps, type Scenario, type TranscriptStep } from './support/scenario.ts';

const write = (file: string, content: string, delayMs = 10): TranscriptStep => ({
  toolCalls: [{ toolName: 'write_file', input: { path: file, content } }],
  delayMs,
});
// The fork's own transcript: entries 1-3 are never played (the fork starts after step 3).
const FORK_STEPS: TranscriptStep[] = [
  write('never-1.txt', 'x\n'),
  write('never-2.txt', 'x\n'),
  write('never-3.txt', 'x\n'),
  write('src/fork-4.ts', 'export const forked = true;\n'),
  { text: 'Fork done.' },
];

let s: Scenario;
let worker: Child;
let forkModel: string;
let source: string;

before(async () => {
  s = await createScenario({ steps: sampleSteps(10, 8), env: { WORKER_LEASE_MS: '8000', WORKER_HEARTBEAT_MS: '400' } });
  const file = path.join(path.dirname(s.transcriptPath), 'fork.json');
  await writeFile(file, JSON.stringify({ steps: FORK_STEPS }));
  forkModel = `replay:${file}`;
  worker = s.spawnWorker();
  source = (await s.dispatch()).agentRunId;
  await s.waitForStatus(source, 'completed', 120_000).catch((err: Error) => {
    throw new Error(`${err.message}\n${worker.output()}`);
  });
});
after(async () => {
  await worker?.stop();
  await s?.close();
});

async function fork(args: string[], workspace = s.workspaceId) {
  const child = spawnNode('scripts/fork.ts', ['--workspace', workspace, ...args], { env: s.env });
  const { code } = await child.exited;
  const line = child.stdout.find((l) => l.startsWith('{'));
  return { code, out: line ? JSON.parse(line) : undefined, err: child.stderr.join('\n') };
}

const treeFiles = async (commit: string) =>
  (await git(s.repo, 'ls-tree', '-r', '--name-only', commit)).split('\n').filter(Boolean).sort();

test('a fork at checkpoint 3 starts from its tree, plays round 4 of its own transcript, and verifies end to end', async () => {
  const before = await s.checkpoints(source);
  assert.equal(before.length, 8);
  const sourceTip = await git(s.repo, 'rev-parse', `refs/heads/${(await s.run(source)).branch}`);

  const { code, out, err } = await fork(['--run', source, '--at', '3', '--model', forkModel]);
  assert.equal(code, 0, err);
  assert.deepEqual(Object.keys(out!).sort(), ['agentRunId', 'branch', 'jobId']);
  const run = await s.waitForStatus(out!.agentRunId, 'completed', 120_000).catch((e: Error) => {
    throw new Error(`${e.message}\n${worker.output()}`);
  });
  assert.equal(run.branch, out!.branch, "the branch printed is the fork's branch");
  assert.notEqual(run.branch, (await s.run(source)).branch);
  assert.deepEqual({ from: run.forked_from_run, seq: run.forked_from_seq }, { from: source, seq: 3 });

  const forked = await s.checkpoints(out!.agentRunId);
  assert.equal(forked[0]!.checkpoint_seq, 1, 'its checkpoints start at 1');
  assert.equal(forked[0]!.step, 4, 'round 4 is its first round');
  assert.equal(forked[0]!.prev_hash, before[2]!.hash, "its chain links to the source checkpoint's hash");
  const anchor = (await s.su`select anchor_hash from checkpoint_anchors where agent_run_id = ${out!.agentRunId}`)[0]!
    .anchor_hash;
  assert.ok(verifyChain(forked as never, anchor).ok, "the fork's chain verifies from its anchor");
  assert.ok(verifyChain(before.slice(0, 3) as never, null).ok, "and the source's up to it");

  // Checkpoint 1's tree = the source's checkpoint 3 tree + the fork's round 4.
  const cp1 = forked[0]!.commit_oid;
  assert.equal(
    await git(s.repo, 'rev-parse', `${cp1}^`),
    before[2]!.commit_oid,
    "made on top of checkpoint 3's commit",
  );
  assert.deepEqual(await treeFiles(cp1), [...(await treeFiles(before[2]!.commit_oid)), 'src/fork-4.ts'].sort());
  assert.equal(await git(s.repo, 'show', `${cp1}:src/fork-4.ts`), 'export const forked = true;');
  assert.ok(!(await treeFiles(cp1)).includes('docs/greet.md'), 'nothing of the source after checkpoint 3');

  // The source is untouched.
  const after = await s.checkpoints(source);
  assert.deepEqual(
    after.map((r) => r.hash),
    before.map((r) => r.hash),
  );
  assert.equal(await git(s.repo, 'rev-parse', `refs/heads/${(await s.run(source)).branch}`), sourceTip);

  for (const id of [source, out!.agentRunId]) {
    const [event] = await s.events(id, 'run_forked');
    assert.ok(event, `run_forked on ${id === source ? 'the source' : 'the fork'}`);
  }
  const check = spawnNode('scripts/integrity-check.ts', ['--workspace', s.workspaceId, '--run', out!.agentRunId], {
    env: s.env,
  });
  assert.equal((await check.exited).code, 0, `integrity-check of the fork:\n${check.output()}`);
});

test("bad arguments, another workspace's run and a missing checkpoint: exit 2, the same answer for the last two", async () => {
  await withWorkspace(s.t.db.app, 'other', (tx) => createWorkspace(tx));
  const foreign = await fork(['--run', source, '--at', '3'], 'other');
  assert.equal(foreign.code, 2, foreign.err);
  const missing = await fork(['--run', 'no-such-run', '--at', '3'], 'other');
  assert.equal(missing.code, 2);
  assert.equal(
    foreign.err.replace(source, 'R'),
    missing.err.replace('no-such-run', 'R'),
    "another workspace's run answers as a missing one",
  );
  const beyond = await fork(['--run', source, '--at', '99']);
  assert.equal(beyond.code, 2);
  assert.match(beyond.err, /no checkpoint 99/);
  for (const bad of [
    ['--run', source, '--at', '0'],
    ['--run', source],
    ['--run', source, '--at', 'x'],
    ['--run', source, '--at', '1', '--model', 'nope'],
  ]) {
    const r = await fork(bad);
    assert.equal(r.code, 2, `${bad.join(' ')}: ${r.err}`);
  }
});

test('rewind: a fork with --cancel-source of a running run; the source stops at its next boundary, the fork goes on', async () => {
  const slow = path.join(path.dirname(s.transcriptPath), 'slow.json');
  // Three quick rounds, then a minute of "thinking": the cancel lands while the source runs.
  await writeFile(
    slow,
    JSON.stringify({
      steps: [
        write('a.txt', 'a\n'),
        write('b.txt', 'b\n'),
        write('c.txt', 'c\n'),
        write('d.txt', 'd\n', 120_000),
        { text: 'x' },
      ],
    }),
  );
  const { agentRunId: running } = await s.dispatch({ model: `replay:${slow}` });
  await waitFor(async () => (await s.checkpoints(running)).length >= 3, {
    timeoutMs: 120_000,
    what: 'three checkpoints',
  });
  const second = s.spawnWorker(); // the fork needs a worker while the first is busy
  try {
    const { code, out, err } = await fork(['--run', running, '--at', '2', '--model', forkModel, '--cancel-source']);
    assert.equal(code, 0, err);
    const src = await s.waitForStatus(running, 'cancelled', 120_000);
    const cps = await s.checkpoints(running);
    assert.equal(cps.length, 3, 'the source keeps its last checkpoint, and does nothing after it');
    assert.equal(
      await git(s.repo, 'rev-parse', `refs/heads/${src.branch}`),
      cps[2]!.commit_oid,
      'its branch is at its last checkpoint',
    );
    const fk = await s.waitForStatus(out!.agentRunId, 'completed', 120_000);
    assert.equal(fk.forked_from_seq, 2);
    const [first] = await s.checkpoints(out!.agentRunId);
    assert.equal(first!.step, 3, "the fork plays the round after the source's step 2");
    assert.deepEqual(
      await treeFiles(first!.commit_oid),
      [...(await treeFiles(cps[1]!.commit_oid)), 'never-3.txt'].sort(),
    );
  } finally {
    await second.stop();
  }
});

test('a pruned checkpoint is refused with the retention reason', async () => {
  await withWorkspace(s.t.db.app, s.workspaceId, (tx) => pruneRuns(tx, [source], LAST_ROW));
  const r = await fork(['--run', source, '--at', '3']);
  assert.equal(r.code, 2, r.err);
  assert.match(r.err, /pruned by retention/);
  const last = await fork(['--run', source, '--at', '8', '--model', forkModel]);
  assert.equal(last.code, 0, `the kept last checkpoint can still be forked: ${last.err}`);
});
