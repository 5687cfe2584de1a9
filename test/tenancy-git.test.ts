// End to end: two workspaces sharing one repository, a real
// worker process, real git. Workspace `other` tries what the issue did against workspace `demo`:
// the same brief id and run-id prefix (and then the very same run id), baseRef set to demo's
// branch, and `git diff` of demo's branch, of the notes ref and of a raw id of demo's commit.
// Every attempt is refused, demo's branch does not move and its integrity-check stays intact.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { createWorkspace } from '../store/runs.ts';
import { withWorkspace } from '../store/workspace.ts';
import { spawnNode, waitFor, type Child } from './support/child.ts';
import { git } from './support/git.ts';
import { createScenario, type Scenario, type TranscriptStep } from './support/scenario.ts';

const SECRET = 'demo-private-source-5c1e';
const VICTIM_ID = 'aaaaaaaa-0000-demo-victim';
const VICTIM_BRANCH = 'echodo/brief-1-aaaaaaaa';

let s: Scenario;
let worker: Child;

const write = (p: string, content: string): TranscriptStep => ({
  toolCalls: [{ toolName: 'write_file', input: { path: p, content } }],
});
const cmd = (command: string): TranscriptStep => ({ toolCalls: [{ toolName: 'run_command', input: { command } }] });

async function transcript(name: string, steps: TranscriptStep[]): Promise<string> {
  const file = path.join(path.dirname(s.transcriptPath), `${name}.json`);
  await writeFile(file, JSON.stringify({ steps }));
  return `replay:${file}`;
}

async function runIn(workspaceId: string, agentRunId: string): Promise<Record<string, any>> {
  return (await s.su`select * from agent_runs where workspace_id = ${workspaceId} and id = ${agentRunId}`)[0]!;
}

async function waitForEnd(workspaceId: string, agentRunId: string): Promise<Record<string, any>> {
  return waitFor(
    async () => {
      const row = await runIn(workspaceId, agentRunId);
      return row?.status === 'completed' || row?.status === 'failed' ? row : undefined;
    },
    { timeoutMs: 40_000, what: `run ${workspaceId}/${agentRunId} to finish` },
  ).catch((err: Error) => {
    throw new Error(`${err.message}\nworker output:\n${worker.output()}`);
  });
}

/** The tool calls recorded across the run's checkpoints (each row may hold only its own rounds). */
async function toolCalls(
  workspaceId: string,
  agentRunId: string,
): Promise<{ round: number; tool: string; ok: boolean; error?: string }[]> {
  const rows =
    await s.su`select tool_history from worker_checkpoints where workspace_id = ${workspaceId} and agent_run_id = ${agentRunId}
                           order by checkpoint_seq`;
  const byRound = new Map<number, { round: number; tool: string; ok: boolean; error?: string }>();
  for (const row of rows) for (const call of row.tool_history) byRound.set(call.round, call);
  return [...byRound.values()];
}

async function integrityCheck(
  workspaceId: string,
  agentRunId: string,
): Promise<{ code: number | null; output: string }> {
  const child = spawnNode('scripts/integrity-check.ts', ['--workspace', workspaceId, '--run', agentRunId], {
    env: s.env,
  });
  const exit = await child.exited;
  return { code: exit.code, output: child.output() };
}

let victimTip: string;

before(async () => {
  // A patient lease: on a loaded machine a 2 s lease is lost between heartbeats (the kill test below
  // expires it by hand instead).
  s = await createScenario({
    workspaceId: 'demo',
    steps: [write('src/victim.ts', `export const v = '${SECRET}';\n`), { text: 'Done.' }],
    env: { WORKER_LEASE_MS: '30000', WORKER_HEARTBEAT_MS: '1000' },
  });
  await withWorkspace(s.t.db.app, 'other', (tx) => createWorkspace(tx));
  worker = s.spawnWorker();
  await worker.waitForLine(/"worker started"/);
  // The victim: demo's run on echodo/brief-1-aaaaaaaa.
  await s.dispatch({ briefId: 'brief-1', agentRunId: VICTIM_ID });
  const victim = await waitForEnd('demo', VICTIM_ID);
  assert.equal(victim.status, 'completed', `victim run failed: ${victim.failure_reason}\n${worker.output()}`);
  assert.equal(victim.branch, VICTIM_BRANCH);
  victimTip = await git(s.repo, 'rev-parse', `refs/heads/${VICTIM_BRANCH}`);
});

after(async () => {
  await worker?.stop('SIGTERM', 5000);
  await s?.close();
});

async function assertVictimIntact(): Promise<void> {
  assert.equal(await git(s.repo, 'rev-parse', `refs/heads/${VICTIM_BRANCH}`), victimTip, "demo's branch did not move");
  const check = await integrityCheck('demo', VICTIM_ID);
  assert.equal(check.code, 0, `demo's integrity-check is intact:\n${check.output}`);
}

test("baseRef naming another workspace's echodo/ branch, or a commit only on it, fails the run with a clear reason", async () => {
  const model = await transcript('attacker-base', [
    write('src/planted.ts', 'export const planted = 1;\n'),
    { text: 'Done.' },
  ]);
  for (const [agentRunId, baseRef] of [
    ['aaaaaaaa-1111-other-a', VICTIM_BRANCH],
    ['aaaaaaaa-1112-other-b', victimTip],
  ] as const) {
    await s.dispatch({ workspaceId: 'other', briefId: 'brief-1', agentRunId, baseRef, model });
    const run = await waitForEnd('other', agentRunId);
    assert.equal(run.status, 'failed', `${baseRef}: refused`);
    const why =
      baseRef === VICTIM_BRANCH
        ? 'it names the branch echodo/brief-1-aaaaaaaa, which belongs to no run of this workspace'
        : 'its commit is reachable only from echodo/ branches of other runs';
    assert.equal(run.failure_reason, `ref_refused: baseRef "${baseRef}" is refused: ${why}`);
    assert.equal(run.branch, null, 'no branch was made or claimed');
  }
  await assertVictimIntact();
});

test('the same brief id and run-id prefix get another branch; git diff of their branch, notes or commit is refused', async () => {
  const agentRunId = 'aaaaaaaa-2222-other-c';
  const model = await transcript('attacker-diff', [
    write('src/mine.ts', 'export const mine = 1;\n'),
    cmd(`git diff HEAD ${VICTIM_BRANCH}`),
    cmd('git diff HEAD refs/notes/echodo-checkpoints'),
    cmd(`git diff HEAD ${victimTip}`),
    cmd('git diff --stat main'),
    { text: 'Done.' },
  ]);
  await s.dispatch({ workspaceId: 'other', briefId: 'brief-1', agentRunId, baseRef: 'main', model });
  const run = await waitForEnd('other', agentRunId);
  assert.equal(run.status, 'completed', `attacker run: ${run.failure_reason}\n${worker.output()}`);
  assert.notEqual(run.branch, VICTIM_BRANCH);
  assert.match(run.branch, /^echodo\/brief-1-aaaaaaaa-[0-9a-f]{8}$/, 'the taken name gets a longer unique suffix');
  assert.ok(
    !existsSync(path.join(run.worktree_path, 'src/victim.ts')),
    "demo's code is not checked out in other's worktree",
  );
  assert.equal(
    await git(s.repo, 'show', `${run.branch}:src/mine.ts`),
    'export const mine = 1;',
    "other's work is on other's branch",
  );

  const history = await toolCalls('other', agentRunId);
  for (const [round, operand] of [
    [2, VICTIM_BRANCH],
    [3, 'refs/notes/echodo-checkpoints'],
    [4, victimTip],
  ] as const) {
    const call = history.find((h) => h.round === round);
    assert.ok(call, `round ${round} in ${JSON.stringify(history)}`);
    assert.equal(call.ok, false, `round ${round} refused`);
    assert.match(call.error!, new RegExp(`argument "${operand.replace(/\//g, '\\/')}" is refused`));
  }
  assert.equal(history.find((h) => h.round === 5)?.ok, true, 'its own history is readable');
  const everything = JSON.stringify(
    await s.su`select tool_history from worker_checkpoints where workspace_id = 'other'`,
  );
  assert.ok(!everything.includes(SECRET), "nothing of demo's source reached other's rows");
  await assertVictimIntact();
});

test('the very same run id in another workspace is an independent run with its own branch and worktree', async () => {
  const model = await transcript('attacker-same-id', [
    write('src/victim.ts', 'export const v = "overwritten";\n'),
    { text: 'Done.' },
  ]);
  const { agentRunId } = await s.dispatch({ workspaceId: 'other', briefId: 'brief-1', agentRunId: VICTIM_ID, model });
  assert.equal(agentRunId, VICTIM_ID);
  const run = await waitForEnd('other', VICTIM_ID);
  assert.equal(run.status, 'completed', `${run.failure_reason}\n${worker.output()}`);
  const victim = await runIn('demo', VICTIM_ID);
  assert.notEqual(run.branch, victim.branch);
  assert.notEqual(run.worktree_path, victim.worktree_path);
  assert.equal(run.worktree_path, path.join(s.env.WORKER_WORKTREE_BASE!, 'other', VICTIM_ID));
  assert.equal(victim.worktree_path, path.join(s.env.WORKER_WORKTREE_BASE!, 'demo', VICTIM_ID));
  assert.equal(await git(victim.worktree_path, 'show', 'HEAD:src/victim.ts'), `export const v = '${SECRET}';`);
  await assertVictimIntact();
  const check = await integrityCheck('other', VICTIM_ID);
  assert.equal(check.code, 0, `other's run is intact too:\n${check.output}`);
});

test("a git branch of the run's name made outside the product is not adopted", async () => {
  await git(s.repo, 'branch', 'echodo/brief-2-bbbbbbbb', 'main');
  const planted = await git(s.repo, 'rev-parse', 'echodo/brief-2-bbbbbbbb');
  const { agentRunId } = await s.dispatch({ briefId: 'brief-2', agentRunId: 'bbbbbbbb-3333-demo' });
  const run = await waitForEnd('demo', agentRunId);
  assert.equal(run.status, 'completed', `${run.failure_reason}\n${worker.output()}`);
  assert.match(run.branch, /^echodo\/brief-2-bbbbbbbb-[0-9a-f]{8}$/);
  assert.equal(await git(s.repo, 'rev-parse', 'echodo/brief-2-bbbbbbbb'), planted, 'the unowned branch is untouched');
});

test('a worker killed right after claiming the branch: the run, re-dispatched, gets the same branch', async () => {
  await worker.stop('SIGTERM', 5000);
  const agentRunId = 'cccccccc-4444-demo';
  await s.dispatch({ briefId: 'brief-3', agentRunId });
  const doomed = s.spawnWorker({ ECHODO_FAULT: 'after-branch-claim' });
  const exit = await doomed.exited;
  assert.equal(exit.signal, 'SIGKILL', `the worker died at the fault point:\n${doomed.output()}`);
  const [claimRow] =
    await s.su`select branch from branch_claims where workspace_id = 'demo' and agent_run_id = ${agentRunId}`;
  assert.equal(claimRow?.branch, 'echodo/brief-3-cccccccc', 'the claim was committed before the kill');
  await s.su`update agent_runs set lease_expires_at = now() - interval '1 second' where workspace_id = 'demo' and id = ${agentRunId}`;
  assert.ok((await s.sweep()).redispatched.includes(agentRunId), 'the stalled run is re-dispatched');
  worker = s.spawnWorker();
  const run = await waitForEnd('demo', agentRunId);
  assert.equal(run.status, 'completed', `${run.failure_reason}\n${worker.output()}`);
  assert.equal(
    run.branch,
    'echodo/brief-3-cccccccc',
    'its own claim answered "yours": the short name, not a longer one',
  );
});
