// Budgets: a run stops at its last checkpoint (budget_exhausted, with a run_budget_exhausted event
// naming the limit and the amount) when the next round would pass a limit; a retry with a larger
// budget resumes it without redoing a round; a workspace's daily cap stops that workspace's next
// run and leaves another workspace's untouched.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { spawnNode, waitFor, type Child } from './support/child.ts';
import { createScenario, type Scenario, type TranscriptStep } from './support/scenario.ts';
import { withWorkspace } from '../store/workspace.ts';
import { createWorkspace } from '../store/runs.ts';
import { parseJob } from '../core/job.ts';
import { createMissionControl } from '../mission-control/server.ts';
import { createAdminToken, createWorkspaceToken } from '../store/tokens.ts';
import { createLogger } from '../worker/log.ts';

const ROUNDS = 5;
// Each round reports a million input tokens: one dollar at the price set below.
const STEPS = [
  ...Array.from({ length: ROUNDS }, (_, i) => ({
    toolCalls: [
      { toolName: 'write_file', input: { path: `src/f${i + 1}.ts`, content: `export const n = ${i + 1};\n` } },
    ],
    usage: { inputTokens: 1_000_000, outputTokens: 0 },
  })),
  { text: 'Done.' },
] as unknown as TranscriptStep[];

let s: Scenario;
let worker: Child;

async function cli(script: string, args: string[]) {
  const child = spawnNode(script, args, { env: s.env });
  const { code } = await child.exited;
  return { code, out: child.stdout.join('\n'), err: child.stderr.join('\n') };
}
const price = (ws: string) =>
  cli('scripts/workspace.ts', [
    'price',
    'set',
    '--workspace',
    ws,
    '--model',
    s.transcriptPath,
    '--input-per-mtok',
    '1',
    '--output-per-mtok',
    '1',
  ]);
const ended = (id: string) =>
  waitFor(
    async () => {
      const row = await s.run(id);
      return ['completed', 'failed', 'budget_exhausted'].includes(row.status) ? row : undefined;
    },
    { timeoutMs: 40_000, what: `run ${id} to end` },
  );

before(async () => {
  s = await createScenario({ steps: STEPS, workspaceId: 'spender' });
  await withWorkspace(s.t.db.app, 'thrifty', (tx) => createWorkspace(tx));
  for (const ws of ['spender', 'thrifty']) assert.equal((await price(ws)).code, 0);
  worker = s.spawnWorker();
  await worker.waitForLine(/"worker started"/);
});

after(async () => {
  await worker?.stop('SIGTERM', 5000);
  await s?.close();
});

test('a job budget is a number; a negative or non-number budget is refused by name', () => {
  const base = { workspaceId: 'w', convoyId: 'c', briefId: 'b', roleId: 'r', baseRef: 'main', brief: 'x', model: 'm' };
  assert.equal(parseJob({ ...base, maxCostUsd: 2.5, maxTokens: 1000 }).ok, true);
  const bad = parseJob({ ...base, maxCostUsd: -1, maxTokens: 1.5 });
  assert.ok(
    !bad.ok &&
      bad.problems.some((p) => p.startsWith('maxCostUsd')) &&
      bad.problems.some((p) => p.startsWith('maxTokens')),
  );
});

test('a run whose third round would pass maxCostUsd stops at checkpoint 2; a retry with more completes it', async () => {
  const { agentRunId } = await s.dispatch({ maxCostUsd: 2.5 });
  const run = await ended(agentRunId);
  assert.equal(run.status, 'budget_exhausted', `${run.failure_reason}\n${worker.output()}`);
  assert.deepEqual(
    (await s.checkpoints(agentRunId)).map((c) => c.checkpoint_seq),
    [1, 2],
  );
  const [event] = await s.events(agentRunId, 'run_budget_exhausted');
  assert.deepEqual(
    { ...event!.metadata },
    { limit: 'maxCostUsd', limitValue: 2.5, amount: 2, nextRoundEstimate: 1, seq: 2, step: 2 },
  );

  // The panel offers Retry for it, and the run list finds it by its status.
  const server = await createMissionControl({
    db: s.t.db,
    config: s.config,
    logger: createLogger({ level: 'silent' }),
  }).start(0);
  try {
    const token = await createWorkspaceToken(s.t.db.app, s.workspaceId);
    const page = await (
      await fetch(`${server.url}/runs/${agentRunId}`, { headers: { cookie: `emc_token=${token}` } })
    ).text();
    assert.match(page, /data-testid="run-actions"[^]*?Retry/);
    const listed = (await (
      await fetch(`${server.url}/api/runs?status=budget_exhausted`, {
        headers: { authorization: `Bearer ${token}` },
      })
    ).json()) as { runs: { agentRunId: string }[] };
    assert.deepEqual(
      listed.runs.map((r) => r.agentRunId),
      [agentRunId],
    );
  } finally {
    await server.close();
  }

  const retry = await cli('scripts/retry.ts', [
    '--workspace',
    s.workspaceId,
    '--run',
    agentRunId,
    '--max-cost-usd',
    '10',
  ]);
  assert.equal(retry.code, 0, retry.err);
  const done = await ended(agentRunId);
  assert.equal(done.status, 'completed', `${done.failure_reason}\n${worker.output()}`);
  assert.equal(done.attempt, 2);
  const rows = await s.checkpoints(agentRunId);
  assert.deepEqual(
    rows.map((c) => [c.checkpoint_seq, c.step]),
    [
      [1, 1],
      [2, 2],
      [3, 3],
      [4, 4],
      [5, 5],
    ],
  );
  const rounds = rows.flatMap((r) => r.tool_history).map((h: { round: number }) => h.round);
  assert.deepEqual(rounds, [1, 2, 3, 4, 5], 'no round was done twice');
  assert.equal((await s.run(agentRunId)).job.maxCostUsd, 10);
});

test('retry refuses a budget that is not an amount, with exit 2', async () => {
  const r = await cli('scripts/retry.ts', ['--workspace', s.workspaceId, '--run', 'nope', '--max-cost-usd', 'plenty']);
  assert.equal(r.code, 2);
  assert.match(r.err, /--max-cost-usd/);
});

test("a workspace daily cap stops that workspace's next run; another workspace is untouched", async () => {
  // The spender workspace has spent $5 today (the five rounds above, none done twice): a cap of $4 is reached.
  assert.equal(
    (await cli('scripts/workspace.ts', ['budget', 'set', '--workspace', 'spender', '--daily-usd', '4'])).code,
    0,
  );
  const capped = await s.dispatch();
  const run = await ended(capped.agentRunId);
  assert.equal(run.status, 'budget_exhausted');
  assert.equal((await s.checkpoints(capped.agentRunId)).length, 0);
  const [event] = await s.events(capped.agentRunId, 'run_budget_exhausted');
  assert.equal(event!.metadata.limit, 'dailyUsd');
  assert.equal(event!.metadata.amount, 5);

  const other = await s.dispatch({ workspaceId: 'thrifty' });
  const free = await ended(other.agentRunId);
  assert.equal(free.status, 'completed', `${free.failure_reason}\n${worker.output()}`);
  assert.equal((await s.checkpoints(other.agentRunId)).length, ROUNDS);

  // The fleet (admin): each workspace's tokens and spend today against its cap, and the runs a budget stopped.
  const server = await createMissionControl({
    db: s.t.db,
    config: s.config,
    logger: createLogger({ level: 'silent' }),
  }).start(0);
  try {
    const admin = await createAdminToken(s.t.db.admin);
    const fleet = (await (
      await fetch(`${server.url}/api/fleet`, { headers: { authorization: `Bearer ${admin}` } })
    ).json()) as { workspaces: { workspaceId: string; today: Record<string, number | null> }[] };
    const today = Object.fromEntries(fleet.workspaces.map((w) => [w.workspaceId, w.today]));
    // The final answers ("Done.") report no usage: one unpriced record per completed run.
    assert.deepEqual(today.spender, {
      tokens: 5_000_000,
      pricedUsd: 5,
      unpriced: 1,
      dailyCapUsd: 4,
      budgetExhausted: 1,
    });
    assert.deepEqual(today.thrifty, {
      tokens: 5_000_000,
      pricedUsd: 5,
      unpriced: 1,
      dailyCapUsd: null,
      budgetExhausted: 0,
    });
    const page = await (await fetch(`${server.url}/fleet`, { headers: { cookie: `emc_token=${admin}` } })).text();
    const row = page.match(/<tr data-workspace-id="spender">.*?<\/tr>/s)?.[0] ?? '';
    assert.match(row, /data-tokens-today>\s*5,000,000\s*</);
    assert.match(row, /data-spend-today>\$5\.00 of \$4\.00 <span class="muted">\(\+1 unpriced\)<\/span></);
    assert.match(row, /data-budget-stops>1</);
  } finally {
    await server.close();
  }
});
