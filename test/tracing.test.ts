// OpenTelemetry traces: a worker with OTEL_EXPORTER_OTLP_ENDPOINT exports, over OTLP/HTTP to a
// loopback server, a span per run attempt, per round, per checkpoint phase and per resume, with
// ids, counts and kinds as attributes and no file contents, brief or path; without the endpoint the
// tracer is the API's no-op one.
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import type { Child } from './support/child.ts';
import { createScenario, type Scenario, type TranscriptStep } from './support/scenario.ts';
import { runStoppedByBudgetThenRetried } from './support/budget-run.ts';
import { inSpan } from '../worker/tracing.ts';

const CONTENT = (i: number) => `export const secretish${i} = 'file contents stay out of traces';\n`;
const STEPS = [
  ...[0, 1, 2].map((i) => ({
    toolCalls: [{ toolName: 'write_file', input: { path: `src/t${i}.ts`, content: CONTENT(i) } }],
    usage: { inputTokens: 100 * (i + 1), outputTokens: 10 },
  })),
  { text: 'Done.' },
] as unknown as TranscriptStep[];

interface OtlpSpan {
  name: string;
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  attributes?: { key: string; value: Record<string, unknown> }[];
}

let s: Scenario;
let worker: Child;
let collector: Server;
const bodies: string[] = [];
let agentRunId: string;

const attr = (span: OtlpSpan, key: string) => {
  const v = span.attributes?.find((a) => a.key === key)?.value;
  return v && (v.stringValue ?? (v.intValue !== undefined ? Number(v.intValue) : undefined));
};

before(async () => {
  collector = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      if (req.url === '/v1/traces') bodies.push(body);
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => collector.listen(0, '127.0.0.1', resolve));
  const endpoint = `http://127.0.0.1:${(collector.address() as AddressInfo).port}`;
  s = await createScenario({ steps: STEPS, workspaceId: 'traced' });
  worker = s.spawnWorker({ OTEL_EXPORTER_OTLP_ENDPOINT: endpoint });
  await worker.waitForLine(/"worker started"/);
  // The run stops at checkpoint 2 on its budget, and its retry resumes it there.
  agentRunId = await runStoppedByBudgetThenRetried(s);
  await worker.stop('SIGTERM', 10_000); // the last spans are flushed on the way out
});

after(async () => {
  await worker?.stop('SIGTERM', 5000);
  await s?.close();
  await new Promise((resolve) => collector?.close(resolve));
});

test('the worker exports a span per run attempt, round, checkpoint phase and resume, over OTLP/HTTP', () => {
  const spans: OtlpSpan[] = bodies.flatMap((b) =>
    (JSON.parse(b) as { resourceSpans: { scopeSpans: { spans: OtlpSpan[] }[] }[] }).resourceSpans.flatMap((r) =>
      r.scopeSpans.flatMap((sc) => sc.spans),
    ),
  );
  const named = (name: string) => spans.filter((sp) => sp.name === name);
  const attempts = named('echodo.run_attempt');
  assert.deepEqual(
    attempts.map((a) => [attr(a, 'echodo.agent_run_id'), attr(a, 'echodo.attempt'), attr(a, 'echodo.result')]),
    [
      [agentRunId, 1, 'released'],
      [agentRunId, 2, 'completed'],
    ],
  );
  assert.equal(attr(attempts[0]!, 'echodo.workspace_id'), 'traced');
  for (const phase of ['commit', 'row']) {
    const phases = named(`echodo.checkpoint.${phase}`);
    assert.deepEqual(
      phases.map((p) => attr(p, 'echodo.checkpoint_seq')),
      [1, 2, 3],
      phase,
    );
    // Each phase is in the trace of the attempt that wrote it.
    assert.deepEqual(
      phases.map((p) => attempts.findIndex((a) => a.traceId === p.traceId)),
      [0, 0, 1],
    );
  }
  assert.ok(named('echodo.checkpoint.note').length >= 1);
  const [resume, ...more] = named('echodo.resume');
  assert.equal(more.length, 0);
  assert.deepEqual([attr(resume!, 'echodo.resume_kind'), attr(resume!, 'echodo.from_seq')], ['same_host', 2]);
  assert.equal(resume!.traceId, attempts[1]!.traceId);
  const rounds = named('echodo.round');
  assert.deepEqual(
    rounds.map((r) => attr(r, 'echodo.round')),
    [1, 2, 3, 4],
    'three tool rounds and the final answer',
  );
  const all = bodies.join('');
  for (const text of [CONTENT(0).trim(), 'secretish', 'Add a greeting module', s.transcriptPath, s.repo])
    assert.ok(!all.includes(text), `${text} is not in the traces`);
});

test('without an endpoint the tracer records nothing', async () => {
  await inSpan('echodo.round', { 'echodo.round': 1 }, async (span) => assert.equal(span.isRecording(), false));
});
