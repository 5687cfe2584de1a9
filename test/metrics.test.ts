// Prometheus metrics, scraped and parsed with a real Prometheus text parser: the worker's own
// /metrics (WORKER_METRICS_PORT) moves by exactly what a known run causes (its rounds, refusals, the
// budget stop and the resume of its retry), and mission control's /metrics shows the fleet (a stall
// sweep included, the queue's depth and the age of its oldest run); a scrape a proxy forwarded, or one
// without the metrics token, is refused.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { waitFor, type Child } from './support/child.ts';
import { scrapeMetrics, workerMetricsPort, type Metrics } from './support/metrics.ts';
import { createScenario, type Scenario, type TranscriptStep } from './support/scenario.ts';
import { createMissionControl, type RunningMissionControl } from '../mission-control/server.ts';
import { createLogger } from '../worker/log.ts';
import { runStoppedByBudgetThenRetried } from './support/budget-run.ts';
import { sweepStalledRuns } from '../operator/stall-detector.ts';

const ROUNDS = 3;
const write = (i: number) => ({
  toolName: 'write_file',
  input: { path: `src/m${i}.ts`, content: `export const m = ${i};\n` },
});
const STEPS = [
  { toolCalls: [write(0)], usage: { inputTokens: 100, outputTokens: 10 } },
  {
    // Refused twice: by the confinement (a path out of the worktree), and for a file that is not there.
    toolCalls: [
      write(1),
      { toolName: 'write_file', input: { path: '../outside.ts', content: 'x' } },
      { toolName: 'read_file', input: { path: 'src/missing.ts' } },
    ],
    usage: { inputTokens: 200, outputTokens: 10 },
  },
  { toolCalls: [write(2)], usage: { inputTokens: 300, outputTokens: 10 } },
  // The final answer has no checkpoint; its usage is kept on the run, and counted.
  { text: 'Done.', usage: { inputTokens: 50, outputTokens: 5 } },
] as unknown as TranscriptStep[];

let s: Scenario;
let worker: Child;
let metrics: Awaited<ReturnType<typeof workerMetricsPort>>;
let agentRunId: string;

before(async () => {
  s = await createScenario({ steps: STEPS, workspaceId: 'metered' });
  metrics = await workerMetricsPort();
  worker = s.spawnWorker(metrics.env);
  await worker.waitForLine(/"worker started"/);
  // The third round would pass the budget, so the run stops at checkpoint 2; its retry resumes it.
  agentRunId = await runStoppedByBudgetThenRetried(s);
});

after(async () => {
  await worker?.stop('SIGTERM', 5000);
  await s?.close();
});

test("the worker's /metrics counts what a known run caused: rounds, refusals, its budget stop and resume", async () => {
  const m: Metrics = await waitFor(
    async () => {
      const scraped = await metrics.scrape();
      return scraped.value('echodo_worker_runs_finished_total', { outcome: 'completed' }) ? scraped : undefined;
    },
    { timeoutMs: 10_000, what: 'the run to be counted' },
  );
  const value = m.value;
  assert.equal(value('echodo_checkpoints_written_total', { workspace: 'metered' }), String(ROUNDS));
  // The budget stop hands the run back (released); its retry completes it.
  assert.equal(value('echodo_worker_runs_finished_total', { outcome: 'released' }), '1');
  assert.equal(value('echodo_worker_runs_finished_total', { outcome: 'completed' }), '1');
  // The retry resumed on this host, from a worktree as the budget stop left it; no other kind.
  assert.deepEqual(m.byLabel('echodo_resumes_total', 'kind'), { same_host: '1' });
  assert.equal(value('echodo_lease_losses_total'), '0');
  assert.equal(value('echodo_tool_calls_total', { tool: 'write_file', outcome: 'ok' }), String(ROUNDS));
  assert.equal(value('echodo_tool_calls_total', { tool: 'write_file', outcome: 'refused' }), '1');
  assert.equal(value('echodo_tool_calls_total', { tool: 'read_file', outcome: 'refused' }), '1');
  // Only the confinement's refusal is a sandbox refusal; a missing file is not.
  assert.deepEqual(m.byLabel('echodo_sandbox_refusals_total', 'rule'), { path: '1' });
  assert.equal(value('echodo_tokens_total', { workspace: 'metered', model: 'replay', kind: 'input' }), '650');
  assert.equal(value('echodo_tokens_total', { kind: 'output' }), '35');
  assert.equal(value('echodo_tokens_total', { kind: 'cache_read' }), undefined, 'unreported kinds are not counted');
  assert.equal(m.type('echodo_checkpoint_write_seconds'), 'HISTOGRAM');
  const count = (phase: string) => m.histogramCount('echodo_checkpoint_write_seconds', { phase });
  for (const phase of ['commit', 'row', 'total']) assert.equal(count(phase), ROUNDS, phase);
  // Notes are written behind the loop, several at a time when they queue up.
  assert.ok(count('note') >= 1 && count('note') <= ROUNDS, `note: ${count('note')}`);
  assert.ok(!m.text.includes(agentRunId) && !m.text.includes(s.transcriptPath), 'no run id or path in any label');
  assert.equal((await fetch(metrics.url.replace(/metrics$/, 'other'))).status, 404);
});

test('mission control /metrics: the fleet to a loopback scrape; refused when proxied or without the token', async (t) => {
  const log = createLogger({ level: 'silent' });
  // A run nobody takes (the worker is gone), re-enqueued by a sweep: a stall sweep the fleet counts.
  await worker.stop('SIGTERM', 5000);
  const { agentRunId: waiting } = await s.dispatch({ briefId: 'brief-2', jobId: 'job-2' });
  // Queued a while ago: the sweep's re-enqueue must not start its wait again.
  await s.su`update agent_runs set queued_at = now() - interval '1 hour' where id = ${waiting}`;
  const dispatchedAt = Date.now() - 3600_000;
  const swept = await sweepStalledRuns({ config: s.config, db: s.t.db, queue: s.queue, log, queuedMs: 0 });
  assert.deepEqual(swept.reenqueued, [waiting]);
  const open: RunningMissionControl = await createMissionControl({ db: s.t.db, config: s.config, logger: log }).start(
    0,
  );
  t.after(() => open.close());
  const scrapedAt = Date.now();
  const m = await scrapeMetrics(`${open.url}/metrics`);
  assert.equal(m.value('echodo_runs', { workspace: 'metered', status: 'completed' }), '1');
  assert.equal(m.value('echodo_queue_depth'), '1');
  // Its age runs from its dispatch, across the sweep's re-enqueue.
  const age = Number(m.value('echodo_queue_oldest_age_seconds'));
  assert.ok(age >= (scrapedAt - dispatchedAt) / 1000 && age <= (Date.now() - dispatchedAt) / 1000, `age ${age} s`);
  assert.equal(m.value('echodo_stall_redispatches_total', { workspace: 'metered', kind: 'reenqueued' }), '1');
  // The retry was a re-dispatch an operator asked for, not a stall.
  assert.equal(m.value('echodo_stall_redispatches_total', { kind: 'redispatched' }), undefined);
  assert.equal(m.value('echodo_tokens', { workspace: 'metered', model: 'replay', kind: 'input' }), '650');
  assert.equal(m.value('echodo_cost_usd', { workspace: 'metered', model: 'replay' }), '0');
  assert.equal(m.value('echodo_unpriced_checkpoints', { workspace: 'metered', model: 'replay' }), String(ROUNDS + 1));
  await s.su`insert into model_prices (workspace_id, model, input_per_mtok, output_per_mtok)
             values ('metered', ${s.transcriptPath}, 1000, 10000)`;
  const priced = await scrapeMetrics(`${open.url}/metrics`);
  // 650 input tokens at $1,000 and 35 output tokens at $10,000 per million.
  assert.equal(Number(priced.value('echodo_cost_usd', { workspace: 'metered', model: 'replay' })), 1);
  assert.equal(priced.value('echodo_unpriced_checkpoints', { workspace: 'metered', model: 'replay' }), '0');
  assert.ok(Number(priced.value('echodo_queue_oldest_age_seconds')) > age, 'the wait grows between scrapes');
  assert.equal((await fetch(`${open.url}/metrics`, { headers: { 'x-forwarded-for': '203.0.113.9' } })).status, 403);

  const token = 'metrics-token-0123456789abcdef';
  const guarded = await createMissionControl({
    db: s.t.db,
    config: { ...s.config, MISSION_CONTROL_METRICS_TOKEN: token },
    logger: log,
  }).start(0);
  t.after(() => guarded.close());
  assert.equal((await fetch(`${guarded.url}/metrics`)).status, 401);
  assert.equal(
    (await fetch(`${guarded.url}/metrics`, { headers: { authorization: 'Bearer wrong-token-0123456789ab' } })).status,
    401,
  );
  // Nothing queued any more: depth and age are 0.
  await s.su`update agent_runs set status = 'failed', finished_at = now() where id = ${waiting}`;
  const ok = await scrapeMetrics(`${guarded.url}/metrics`, {
    authorization: `Bearer ${token}`,
    'x-forwarded-for': '203.0.113.9',
  });
  assert.equal(ok.value('echodo_runs', { workspace: 'metered', status: 'completed' }), '1');
  assert.equal(ok.value('echodo_queue_depth'), '0');
  assert.equal(ok.value('echodo_queue_oldest_age_seconds'), '0');
});
