// Cost is a query over the recorded usage (the checkpoint rows, and the run's final text-only answer,
// which no checkpoint holds) and the prices: the workspace's own prices (`npm run workspace -- price …`)
// over the shipped table; a model without a price is unpriced (null), never free; per checkpoint, run,
// convoy and workspace day alike.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { spawnNode, waitFor, type Child } from './support/child.ts';
import { createScenario, type Scenario, type TranscriptStep } from './support/scenario.ts';
import { checkpointCosts, convoyCost, runCost, workspaceDayCost } from '../store/cost.ts';
import { withWorkspace } from '../store/workspace.ts';
import { SHIPPED_PRICES, SHIPPED_PRICES_AS_OF } from '../core/prices.ts';
import { createMissionControl } from '../mission-control/server.ts';
import { createWorkspaceToken } from '../store/tokens.ts';
import { createLogger } from '../worker/log.ts';

const write = (path: string) => ({ toolName: 'write_file', input: { path, content: `// ${path}\n` } });
const STEPS = [
  { toolCalls: [write('src/a.ts')], usage: { inputTokens: 1000, outputTokens: 100, cacheReadTokens: 400 } },
  { toolCalls: [write('src/b.ts')], usage: { inputTokens: 2000, outputTokens: 50 } },
  { text: 'Done.', usage: { inputTokens: 3000, outputTokens: 20 } },
] as unknown as TranscriptStep[];

let s: Scenario;
let worker: Child;
let agentRunId: string;

async function cli(args: string[]) {
  const child = spawnNode('scripts/workspace.ts', args, { env: s.env });
  const { code } = await child.exited;
  return { code, out: child.stdout.join('\n'), err: child.stderr.join('\n') };
}
const scoped = <T>(fn: Parameters<typeof withWorkspace<T>>[2]) => withWorkspace(s.t.db.app, s.workspaceId, fn);
const close = (a: number | null, b: number) => assert.ok(a !== null && Math.abs(a - b) < 1e-12, `${a} ≈ ${b}`);

before(async () => {
  s = await createScenario({ steps: STEPS, workspaceId: 'costly' });
  worker = s.spawnWorker();
  await worker.waitForLine(/"worker started"/);
  ({ agentRunId } = await s.dispatch());
  const run = await waitFor(
    async () => {
      const row = await s.run(agentRunId);
      return ['completed', 'failed'].includes(row.status) ? row : undefined;
    },
    { timeoutMs: 40_000, what: 'the run to finish' },
  );
  assert.equal(run.status, 'completed', `${run.failure_reason}\n${worker.output()}`);
});

after(async () => {
  await worker?.stop('SIGTERM', 5000);
  await s?.close();
});

test('a model without a price is unpriced: null cost, never 0, with the tokens still counted', async () => {
  const total = await scoped((tx) => runCost(tx, agentRunId));
  assert.equal(total.costUsd, null);
  assert.equal(total.checkpoints, 2);
  assert.equal(total.unpricedCheckpoints, 3, 'two checkpoints and the final answer');
  assert.deepEqual(
    [total.inputTokens, total.outputTokens, total.cacheReadTokens, total.cacheWriteTokens],
    [6000, 170, 400, null],
  );
  const run = await s.run(agentRunId);
  assert.deepEqual(
    [run.final_usage.inputTokens, run.final_usage.outputTokens, run.final_usage.cacheReadTokens],
    [3000, 20, null],
    'the final text-only round is kept on the run',
  );
  assert.deepEqual(
    (await scoped((tx) => checkpointCosts(tx, agentRunId))).map((c) => c.costUsd),
    [null, null],
  );
});

test('price set prices every checkpoint, run, convoy and day from the rows; price rm makes it unpriced again', async () => {
  const set = await cli([
    'price',
    'set',
    '--workspace',
    s.workspaceId,
    '--model',
    s.transcriptPath,
    '--input-per-mtok',
    '3',
    '--output-per-mtok',
    '15',
    '--cache-read-per-mtok',
    '0.3',
  ]);
  assert.equal(set.code, 0, set.err);
  const per = await scoped((tx) => checkpointCosts(tx, agentRunId));
  // Uncached input at the input price, cache reads at theirs, output at the output price.
  close(per[0]!.costUsd, (600 * 3 + 400 * 0.3 + 100 * 15) / 1e6);
  close(per[1]!.costUsd, (2000 * 3 + 50 * 15) / 1e6);
  // The final answer, kept on the run, is part of the run's cost.
  const expected = per[0]!.costUsd! + per[1]!.costUsd! + (3000 * 3 + 20 * 15) / 1e6;
  close((await scoped((tx) => runCost(tx, agentRunId))).costUsd, expected);
  close((await scoped((tx) => convoyCost(tx, 'convoy-1'))).costUsd, expected);
  close((await scoped((tx) => workspaceDayCost(tx))).costUsd, expected);
  assert.equal((await scoped((tx) => workspaceDayCost(tx, '2001-01-01'))).checkpoints, 0);

  const list = await cli(['price', 'list', '--workspace', s.workspaceId]);
  assert.equal(list.code, 0, list.err);
  const lines = list.out
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l));
  assert.deepEqual(lines[0], {
    model: s.transcriptPath,
    inputPerMtok: 3,
    outputPerMtok: 15,
    cacheReadPerMtok: 0.3,
    cacheWritePerMtok: null,
    source: 'workspace',
  });
  assert.equal(lines.length, 1 + SHIPPED_PRICES.length);
  assert.ok(lines.slice(1).every((l) => l.source === `shipped ${SHIPPED_PRICES_AS_OF}`));

  assert.equal((await cli(['price', 'rm', '--workspace', s.workspaceId, '--model', s.transcriptPath])).code, 0);
  assert.equal((await scoped((tx) => runCost(tx, agentRunId))).costUsd, null);
  assert.equal((await cli(['price', 'rm', '--workspace', s.workspaceId, '--model', s.transcriptPath])).code, 2);
});

test('price and budget input is refused with exit 2 and nothing written', async () => {
  for (const args of [
    ['price', 'set', '--workspace', s.workspaceId, '--model', 'm', '--input-per-mtok', '-1', '--output-per-mtok', '1'],
    ['price', 'set', '--workspace', s.workspaceId, '--model', 'm', '--input-per-mtok', '1'],
    ['budget', 'set', '--workspace', s.workspaceId, '--daily-usd', 'lots'],
    ['budget', 'set', '--workspace', s.workspaceId],
  ]) {
    const r = await cli(args);
    assert.equal(r.code, 2, `${args.join(' ')}: ${r.err}`);
  }
  assert.equal((await s.su`select count(*)::int as n from model_prices`)[0]!.n, 0);
  assert.equal((await cli(['budget', 'set', '--workspace', s.workspaceId, '--daily-usd', '2.5'])).code, 0);
  assert.deepEqual(
    (await s.su`select workspace_id, daily_usd::float8 as d from workspace_budgets`).map((r) => [r.workspace_id, r.d]),
    [[s.workspaceId, 2.5]],
  );
});

test('GET /api/runs/:id and the run page show tokens and cost: unpriced until a price is set, per checkpoint and total', async (t) => {
  const server = await createMissionControl({
    db: s.t.db,
    config: s.config,
    logger: createLogger({ level: 'silent' }),
  }).start(0);
  t.after(() => server.close());
  const token = await createWorkspaceToken(s.t.db.app, s.workspaceId);
  const api = async () =>
    (
      await fetch(`${server.url}/api/runs/${agentRunId}`, {
        headers: { authorization: `Bearer ${token}` },
      })
    ).json() as Promise<Record<string, any>>;
  const page = async () =>
    (await fetch(`${server.url}/runs/${agentRunId}`, { headers: { cookie: `emc_token=${token}` } })).text();

  const unpriced = await api();
  assert.equal(unpriced.costUsd, null);
  assert.deepEqual(unpriced.usage, {
    inputTokens: 6000,
    outputTokens: 170,
    cacheReadTokens: 400,
    cacheWriteTokens: null,
    reasoningTokens: null,
  });
  assert.match(await page(), /<tr data-usage-total>.*?<th class="num" data-cost>unpriced<\/th>/s);

  const set = await cli([
    'price',
    'set',
    '--workspace',
    s.workspaceId,
    '--model',
    s.transcriptPath,
    '--input-per-mtok',
    '3',
    '--output-per-mtok',
    '15',
    '--cache-read-per-mtok',
    '0.3',
  ]);
  assert.equal(set.code, 0, set.err);
  close((await api()).costUsd, 0.01947);
  const html = await page();
  assert.match(html, /<tr data-usage-seq="1">.*?data-cost>\$0\.00342<\/td>/s);
  assert.match(html, /<tr data-usage-seq="2">.*?data-cost>\$0\.00675<\/td>/s);
  // The final answer, which no checkpoint holds: its own row, in the total.
  assert.match(html, /<tr data-usage-final>.*?>3,000<.*?data-cost>\$0\.0093<\/td>/s);
  assert.match(html, /<tr data-usage-total>.*?data-cost>\$0\.0195<\/th>/s);

  // The convoy (its API and page) and the workspace's spend today against its cap (set above: $2.50).
  const convoy = (await (
    await fetch(`${server.url}/api/convoys/convoy-1`, { headers: { authorization: `Bearer ${token}` } })
  ).json()) as Record<string, any>;
  close(convoy.costUsd, 0.01947);
  assert.equal(convoy.usage.outputTokens, 170);
  const cookie = { cookie: `emc_token=${token}` };
  assert.match(
    await (await fetch(`${server.url}/convoys/convoy-1`, { headers: cookie })).text(),
    /<section data-convoy-usage>.*?data-cost>\$0\.0195<\/td>/s,
  );
  assert.match(
    await (await fetch(`${server.url}/`, { headers: cookie })).text(),
    /Spent today: <strong>\$0\.0195<\/strong>,\s*of a daily cap of \$2\.50\./,
  );
  assert.equal((await cli(['price', 'rm', '--workspace', s.workspaceId, '--model', s.transcriptPath])).code, 0);
});
