// Usage per round: each checkpoint row records what the model reported for its rounds (input,
// output, cache read, cache write, reasoning tokens) and the model id; a count not reported is null.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { waitFor, type Child } from './support/child.ts';
import { createScenario, type Scenario, type TranscriptStep } from './support/scenario.ts';
import { addUsage, NO_USAGE, roundUsage } from '../worker/models/usage.ts';
import { parseTranscript } from '../worker/models/transcript.ts';

const write = (path: string) => ({ toolName: 'write_file', input: { path, content: `// ${path}\n` } });

const STEPS = [
  {
    toolCalls: [write('src/a.ts')],
    usage: { inputTokens: 1200, outputTokens: 80, cacheReadTokens: 1000, cacheWriteTokens: 150, reasoningTokens: 12 },
  },
  { toolCalls: [write('src/b.ts')], usage: { inputTokens: 1300, outputTokens: 90 } },
  { toolCalls: [write('src/c.ts')] },
  { text: 'Done.' },
] as unknown as TranscriptStep[];

let s: Scenario;
let worker: Child;

before(async () => {
  s = await createScenario({ steps: STEPS });
  worker = s.spawnWorker();
  await worker.waitForLine(/"worker started"/);
});

after(async () => {
  await worker?.stop('SIGTERM', 5000);
  await s?.close();
});

test('each checkpoint row records its round usage as reported, null where a count was not reported', async () => {
  const { agentRunId } = await s.dispatch();
  const run = await waitFor(
    async () => {
      const row = await s.run(agentRunId);
      return ['completed', 'failed'].includes(row.status) ? row : undefined;
    },
    { timeoutMs: 40_000, what: 'the run to finish' },
  );
  assert.equal(run.status, 'completed', `${run.failure_reason}\n${worker.output()}`);
  const rows = await s.checkpoints(agentRunId);
  const usage = rows.map((r) =>
    [r.input_tokens, r.output_tokens, r.cache_read_tokens, r.cache_write_tokens, r.reasoning_tokens].map((n) =>
      n === null ? null : Number(n),
    ),
  );
  assert.deepEqual(usage, [
    [1200, 80, 1000, 150, 12],
    [1300, 90, null, null, null],
    [null, null, null, null, null],
  ]);
  for (const r of rows) assert.equal(r.model_id, s.transcriptPath, "the model id is the replay model's");
});

test('usage of several rounds adds known counts and keeps unknown ones unknown', () => {
  const a = roundUsage(
    {
      inputTokens: 10,
      outputTokens: 2,
      totalTokens: 12,
      inputTokenDetails: { noCacheTokens: 4, cacheReadTokens: 6, cacheWriteTokens: undefined },
      outputTokenDetails: { textTokens: 2, reasoningTokens: undefined },
    },
    'm-1',
  );
  const b = roundUsage(undefined, undefined);
  assert.deepEqual(b, NO_USAGE);
  assert.deepEqual(addUsage(a, b), { ...a });
  assert.deepEqual(addUsage(a, a), {
    inputTokens: 20,
    outputTokens: 4,
    cacheReadTokens: 12,
    cacheWriteTokens: null,
    reasoningTokens: null,
    modelId: 'm-1',
  });
});

test("a transcript entry's usage must be counts; an unknown usage field is refused", () => {
  assert.throws(() => parseTranscript({ steps: [{ text: 'x', usage: { inputTokens: -1 } }] }), /usage\.inputTokens/);
  assert.throws(() => parseTranscript({ steps: [{ text: 'x', usage: { costUsd: 1 } }] }), /unexpected field/);
  assert.equal(
    parseTranscript({ steps: [{ text: 'x', usage: { outputTokens: 3 } }] }).steps[0]!.usage?.outputTokens,
    3,
  );
});
