import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile, mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { generateText, streamText, stepCountIs, tool } from 'ai';
import { z } from 'zod';
import { ReplayModel, TRANSCRIPT_ENDED_TEXT } from '../worker/models/replay.ts';
import { loadTranscript, parseTranscript, TranscriptError, type Transcript } from '../worker/models/transcript.ts';
import { resolveModel } from '../worker/models/resolve.ts';
import { EchodoError } from '../core/errors.ts';

const threeRounds: Transcript = {
  steps: [
    { toolCalls: [{ toolName: 'write_file', input: { path: 'a.txt', content: 'one' } }] },
    {
      toolCalls: [
        { toolName: 'read_file', input: { path: 'a.txt' } },
        { toolName: 'write_file', input: { path: 'b.txt', content: 'two' } },
      ],
    },
    { toolCalls: [{ toolName: 'read_file', input: { path: 'b.txt' } }] },
    { text: 'Done.' },
  ],
};

/** Real tools over an in-memory file map, recording each execution in order. */
function fileTools() {
  const files = new Map<string, string>();
  const executed: Array<{ tool: string; input: unknown; toolCallId: string }> = [];
  const tools = {
    write_file: tool({
      description: 'write a file',
      inputSchema: z.object({ path: z.string(), content: z.string() }),
      execute: async (input, { toolCallId }) => {
        executed.push({ tool: 'write_file', input, toolCallId });
        files.set(input.path, input.content);
        return { written: input.path };
      },
    }),
    read_file: tool({
      description: 'read a file',
      inputSchema: z.object({ path: z.string() }),
      execute: async (input, { toolCallId }) => {
        executed.push({ tool: 'read_file', input, toolCallId });
        return { content: files.get(input.path) ?? null };
      },
    }),
  };
  return { tools, executed, files };
}

test('a transcript of three tool rounds drives generateText through the tools in order, then its final text', async () => {
  const { tools, executed } = fileTools();
  const model = new ReplayModel({ transcript: threeRounds, startAt: 0 });
  const stepResults: Array<Array<{ toolName: string; output: unknown }>> = [];

  const result = await generateText({
    model,
    tools,
    prompt: 'do the thing',
    stopWhen: stepCountIs(10),
    onStepFinish: (step) => {
      stepResults.push(step.toolResults.map((r) => ({ toolName: r.toolName, output: r.output })));
    },
  });

  assert.deepEqual(executed, [
    { tool: 'write_file', input: { path: 'a.txt', content: 'one' }, toolCallId: 'replay-0-0' },
    { tool: 'read_file', input: { path: 'a.txt' }, toolCallId: 'replay-1-0' },
    { tool: 'write_file', input: { path: 'b.txt', content: 'two' }, toolCallId: 'replay-1-1' },
    { tool: 'read_file', input: { path: 'b.txt' }, toolCallId: 'replay-2-0' },
  ]);
  assert.equal(result.text, 'Done.');
  assert.equal(result.finishReason, 'stop');
  assert.equal(result.steps.length, 4);
  assert.deepEqual(
    result.steps.map((s) => s.finishReason),
    ['tool-calls', 'tool-calls', 'tool-calls', 'stop'],
  );
  // onStepFinish fires once per model response: three tool rounds with their results, then the text.
  assert.deepEqual(stepResults, [
    [{ toolName: 'write_file', output: { written: 'a.txt' } }],
    [
      { toolName: 'read_file', output: { content: 'one' } },
      { toolName: 'write_file', output: { written: 'b.txt' } },
    ],
    [{ toolName: 'read_file', output: { content: 'two' } }],
    [],
  ]);
  assert.equal(model.entriesPlayed, 4);
});

test('startAt 2 starts at the third entry, whatever the prompt says', async () => {
  const { tools, executed } = fileTools();
  const model = new ReplayModel({ transcript: threeRounds, startAt: 2 });
  const result = await generateText({ model, tools, prompt: 'resumed', stopWhen: stepCountIs(10) });
  assert.deepEqual(
    executed.map((e) => [e.tool, e.input, e.toolCallId]),
    [['read_file', { path: 'b.txt' }, 'replay-2-0']],
  );
  assert.equal(result.text, 'Done.');
  assert.equal(model.entriesPlayed, 2);
  assert.equal(model.nextEntryIndex, 4);
});

test('stepCountIs stops between rounds and a second session continues where the count says', async () => {
  const first = fileTools();
  const model = new ReplayModel({ transcript: threeRounds, startAt: 0 });
  await generateText({ model, tools: first.tools, prompt: 'x', stopWhen: stepCountIs(2) });
  assert.deepEqual(
    first.executed.map((e) => e.toolCallId),
    ['replay-0-0', 'replay-1-0', 'replay-1-1'],
  );
  assert.equal(model.entriesPlayed, 2);

  const second = fileTools();
  const resumed = new ReplayModel({ transcript: threeRounds, startAt: model.nextEntryIndex });
  const result = await generateText({ model: resumed, tools: second.tools, prompt: 'y', stopWhen: stepCountIs(10) });
  assert.deepEqual(
    second.executed.map((e) => e.toolCallId),
    ['replay-2-0'],
  );
  assert.equal(result.text, 'Done.');
});

test('past the end of the transcript the model answers "(transcript ended)" and stops', async () => {
  const model = new ReplayModel({ transcript: threeRounds, startAt: 4 });
  const result = await generateText({ model, tools: fileTools().tools, prompt: 'x', stopWhen: stepCountIs(10) });
  assert.equal(result.text, TRANSCRIPT_ENDED_TEXT);
  assert.equal(result.finishReason, 'stop');
  assert.equal(model.entriesPlayed, 0);
});

test('an entry with text and tool calls returns both', async () => {
  const model = new ReplayModel({
    transcript: {
      steps: [{ text: 'Writing it.', toolCalls: [{ toolName: 'write_file', input: { path: 'c', content: 'x' } }] }],
    },
    startAt: 0,
  });
  const result = await model.doGenerate({ prompt: [] });
  assert.deepEqual(result.content, [
    { type: 'text', text: 'Writing it.' },
    { type: 'tool-call', toolCallId: 'replay-0-0', toolName: 'write_file', input: '{"path":"c","content":"x"}' },
  ]);
  assert.deepEqual(result.finishReason, { unified: 'tool-calls', raw: 'tool-calls' });
});

test('delayMs is honoured: the model call takes at least that long', async () => {
  const model = new ReplayModel({ transcript: { steps: [{ text: 'thought hard', delayMs: 300 }] }, startAt: 0 });
  const started = performance.now();
  const result = await generateText({ model, prompt: 'x' });
  assert.ok(performance.now() - started >= 250, 'the delay was skipped');
  assert.equal(result.text, 'thought hard');
});

test('aborting mid-delay rejects promptly and does not advance the transcript', { timeout: 10_000 }, async () => {
  const model = new ReplayModel({ transcript: { steps: [{ text: 'never', delayMs: 60_000 }] }, startAt: 0 });
  const controller = new AbortController();
  setTimeout(() => controller.abort(new Error('stop thinking')), 50);
  // If abort were ignored this would wait 60 s, past this test's 10 s timeout.
  await assert.rejects(generateText({ model, prompt: 'x', abortSignal: controller.signal }), /stop thinking/);
  assert.equal(model.entriesPlayed, 0);
  assert.equal(model.nextEntryIndex, 0);
});

test('the model-level signal also aborts the delay', { timeout: 10_000 }, async () => {
  const controller = new AbortController();
  const model = new ReplayModel({
    transcript: { steps: [{ text: 'never', delayMs: 60_000 }] },
    startAt: 0,
    signal: controller.signal,
  });
  setTimeout(() => controller.abort(new Error('lease lost')), 50);
  await assert.rejects(model.doGenerate({ prompt: [] }), /lease lost/);
});

test(
  'an entry with delayMs passes the during-model-call fault point before answering',
  { timeout: 30_000 },
  async () => {
    // A real child process armed with ECHODO_FAULT kills itself on the 2nd delayed entry.
    const replayModule = fileURLToPath(new URL('../worker/models/replay.ts', import.meta.url));
    const script = `
    import { ReplayModel } from ${JSON.stringify(replayModule)};
    const model = new ReplayModel({ startAt: 0, transcript: { steps: [
      { text: 'zero', delayMs: 0 }, { text: 'one' }, { text: 'two', delayMs: 5 }, { text: 'three' } ] } });
    for (let i = 0; i < 4; i++) {
      const r = await model.doGenerate({ prompt: [] });
      console.log('played', r.content[0].text);
    }`;
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      env: { ...process.env, ECHODO_FAULT: 'during-model-call@2' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve) =>
      child.on('exit', (c, s) => resolve([c, s])),
    );
    assert.equal(signal, 'SIGKILL', `expected SIGKILL, got code ${code}; stderr: ${stderr}`);
    assert.deepEqual(stdout.trim().split('\n'), ['played zero', 'played one']);
    assert.match(stderr, /fault point during-model-call reached/);
  },
);

test('doStream emits the same content, so streamText runs the tool rounds too', async () => {
  const { tools, executed } = fileTools();
  const model = new ReplayModel({ transcript: threeRounds, startAt: 0 });
  const result = streamText({ model, tools, prompt: 'x', stopWhen: stepCountIs(10) });
  assert.equal(await result.text, 'Done.');
  assert.deepEqual(
    executed.map((e) => e.toolCallId),
    ['replay-0-0', 'replay-1-0', 'replay-1-1', 'replay-2-0'],
  );
  assert.equal((await result.steps).length, 4);
});

test('bad transcripts give clear errors naming the file or the bad field', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'replay-model-test-'));
  t.after(() => rm(dir, { recursive: true, force: true }));

  const missing = join(dir, 'missing.json');
  await assert.rejects(loadTranscript(missing), (err: unknown) => {
    assert.ok(err instanceof TranscriptError, 'err instanceof TranscriptError');
    assert.ok(err instanceof EchodoError, 'err instanceof EchodoError');
    assert.match(err.message, /does not exist/);
    assert.ok(err.message.includes(missing), 'err.message.includes(missing)');
    return true;
  });

  const notJson = join(dir, 'not-json.json');
  await writeFile(notJson, '{"steps": [ secret-looking-content ');
  await assert.rejects(loadTranscript(notJson), (err: unknown) => {
    assert.ok(err instanceof TranscriptError, 'err instanceof TranscriptError');
    assert.match(err.message, /is not valid JSON/);
    assert.ok(err.message.includes(notJson), 'err.message.includes(notJson)');
    assert.ok(!err.message.includes('secret-looking-content'), 'the file contents must not be echoed');
    return true;
  });

  const badField = join(dir, 'bad-field.json');
  await writeFile(badField, JSON.stringify({ steps: [{ text: 'ok' }, { toolCalls: [{ toolName: 7, input: {} }] }] }));
  await assert.rejects(loadTranscript(badField), /steps\[1\]\.toolCalls\[0\]\.toolName/);

  const badDelay = join(dir, 'bad-delay.json');
  await writeFile(badDelay, JSON.stringify({ steps: [{ text: 'ok', delayMs: -5 }] }));
  await assert.rejects(loadTranscript(badDelay), /steps\[0\]\.delayMs/);

  await mkdir(join(dir, 'a-dir.json'));
  await assert.rejects(loadTranscript(join(dir, 'a-dir.json')), /is a directory/);

  assert.throws(() => parseTranscript({ steps: [{}] }), /steps\[0\].*toolCalls or text/);
  assert.throws(
    () => parseTranscript({ steps: [{ toolcalls: [] }] }),
    (err: unknown) => {
      assert.match((err as Error).message, /steps\[0\]: 1 unexpected field/);
      assert.ok(!(err as Error).message.includes('toolcalls'), 'a field of the file is never named');
      return true;
    },
  );
  assert.throws(() => parseTranscript({ steps: [] }), /steps/);
  assert.throws(
    () => parseTranscript({ steps: [{ toolCalls: [{ toolName: 'x', input: 'nope' }] }] }),
    /steps\[0\]\.toolCalls\[0\]\.input/,
  );

  const good = join(dir, 'good.json');
  await writeFile(good, JSON.stringify(threeRounds));
  assert.deepEqual(await loadTranscript(good), threeRounds);
});

test('resolveModel turns replay:<absolute path> into a ReplayModel starting at startAt', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'replay-model-test-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const path = join(dir, 'transcript.json');
  await writeFile(path, JSON.stringify(threeRounds));
  const lookupProvider = async () => assert.fail('a replay model needs no provider lookup');

  const resolved = await resolveModel({ model: `replay:${path}`, lookupProvider, startAt: 3, replayDir: dir });
  assert.ok(resolved.model instanceof ReplayModel, 'resolved.model instanceof ReplayModel');
  assert.ok(resolved.description.includes(path), 'resolved.description.includes(path)');
  assert.equal(resolved.apiKeyEnvVar, undefined);
  const result = await generateText({ model: resolved.model, prompt: 'x' });
  assert.equal(result.text, 'Done.');

  await assert.rejects(
    resolveModel({ model: 'replay:relative/t.json', lookupProvider, startAt: 0, replayDir: dir }),
    /must be absolute/,
  );
  await assert.rejects(
    resolveModel({ model: `replay:${join(dir, 'nope.json')}`, lookupProvider, startAt: 0, replayDir: dir }),
    (err: unknown) => err instanceof EchodoError && err.code === 'model_unknown' && /does not exist/.test(err.message),
  );
});

test('resolveModel rejects an alias that is not in model_providers', async () => {
  const asked: string[] = [];
  await assert.rejects(
    resolveModel({
      model: 'gpt-nope',
      lookupProvider: async (alias) => {
        asked.push(alias);
        return undefined;
      },
      startAt: 0,
    }),
    (err: unknown) =>
      err instanceof EchodoError &&
      err.code === 'model_unknown' &&
      err.message === 'model alias "gpt-nope" is not in model_providers of this workspace',
  );
  assert.deepEqual(asked, ['gpt-nope']);
});
