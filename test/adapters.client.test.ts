// The worker's AG-UI client on its own, against real loopback servers: a silent agent times out,
// a redirect is refused (a key could follow it), events that do not validate are ignored, and a
// header key goes only to a host its grant names.
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import { EventType } from '@ag-ui/core';
import { runAgUi } from '../worker/adapters/ag-ui-client.ts';
import { remoteAgentModel } from '../worker/adapters/index.ts';
import { PROBE_TIMEOUT_MS, probeAgUiEndpoint } from '../worker/adapters/probe.ts';
import { builtinHarnesses } from '../worker/run/harnesses.ts';
import { frame, startAgUiAgent } from './support/ag-ui-agent.ts';
import { checkpointEvents } from '../mission-control/ag-ui-events.ts';

let server: Server;
let base: string;
const input = {
  threadId: 't',
  runId: 'r',
  messages: [{ id: 'u', role: 'user' as const, content: 'hi' }],
  tools: [],
  context: [],
};

before(async () => {
  server = createServer((req, res) => {
    if (req.url === '/silent')
      return void res.writeHead(200, { 'content-type': 'text/event-stream' }).write(': waiting\n\n');
    if (req.url === '/redirect') return void res.writeHead(307, { location: 'http://example.invalid/' }).end();
    if (req.url === '/state') {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      return void res.end(
        frame({ type: EventType.RUN_STARTED, threadId: 't', runId: 'r' }) +
          frame({ type: EventType.STATE_DELTA, delta: [{ op: 'add', path: '/steps/-', value: 'plan' }] }) +
          frame({ type: EventType.STATE_DELTA, delta: [{ op: 'add', path: '/__proto__/polluted', value: true }] }) +
          frame({ type: EventType.STATE_DELTA, delta: [{ op: 'remove', path: '/missing' }] }) +
          frame({
            type: EventType.STATE_DELTA,
            delta: [{ op: 'replace', path: '/note', value: 'sk-' + 'x'.repeat(40) }],
          }) +
          frame({ type: EventType.RUN_FINISHED, threadId: 't', runId: 'r' }),
      );
    }
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.end(
      frame({ type: EventType.RUN_STARTED, threadId: 't', runId: 'r' }) +
        frame({ type: 'NOT_AN_EVENT', x: 1 }) +
        'data: not json\n\n' +
        frame({ type: EventType.TOOL_CALL_ARGS, toolCallId: 'never-started', delta: '{}' }) +
        frame({ type: EventType.TEXT_MESSAGE_CONTENT, messageId: 'm', delta: 'hello' }) +
        frame({ type: EventType.TOOL_CALL_START, toolCallId: 'open', toolCallName: 'grep' }) +
        frame({ type: EventType.RUN_FINISHED, threadId: 't', runId: 'r' }),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
after(() => new Promise<void>((resolve) => (server.closeAllConnections(), server.close(() => resolve()))));

test('a silent agent times out, a redirect is refused, junk events are ignored, an unended call dropped', async () => {
  await assert.rejects(runAgUi({ url: `${base}/silent`, input, timeoutMs: 300 }), /did not finish within/);
  // The Test of a harness: a silent agent is an error within its limit (10 s by default), not a hang.
  assert.equal(PROBE_TIMEOUT_MS, 10_000);
  const probe = await probeAgUiEndpoint({ url: `${base}/silent`, keyEnvVar: null }, { timeoutMs: 300 });
  assert.ok(!probe.ok && /did not finish within/.test(probe.error) && probe.latencyMs < 5_000, JSON.stringify(probe));
  await assert.rejects(runAgUi({ url: `${base}/redirect`, input, timeoutMs: 2000 }), /could not be reached/);
  const result = await runAgUi({ url: `${base}/ok`, input, timeoutMs: 2000 });
  assert.equal(result.text, 'hello');
  assert.deepEqual(result.toolCalls, [], 'a call that never ended is not executed');
});

test('a header key goes only to a granted host', () => {
  const harness = {
    ...builtinHarnesses({ WORKER_ALLOWED_COMMANDS: undefined } as never).code!,
    adapter: 'remote-ag-ui' as const,
    endpointUrl: `${base}/ok`,
    keyEnvVar: 'AGENT_API_KEY',
  };
  const env = { AGENT_API_KEY: 'sk-x' };
  const args = {
    agentRunId: 'run',
    attempt: 1,
    history: () => [],
    nextRound: () => 1,
    env,
    keyVarGlobs: ['*_API_KEY'],
  };
  assert.throws(() => remoteAgentModel(harness, args), /not granted/);
  assert.throws(
    () => remoteAgentModel(harness, { ...args, keyGrant: { variable: 'AGENT_API_KEY', hosts: ['agents.example'] } }),
    /granted .* only for agents\.example/,
  );
  assert.ok(
    remoteAgentModel(harness, { ...args, keyGrant: { variable: 'AGENT_API_KEY', hosts: ['127.0.0.1'] } }).model,
  );
});

test('STATE_DELTA is a JSON Patch on the state; one that fails or reaches a prototype is dropped', async () => {
  const result = await runAgUi({
    url: `${base}/state`,
    input: { ...input, state: { steps: ['read'], note: 'n' } },
    timeoutMs: 2000,
  });
  assert.deepEqual(result.state, { steps: ['read', 'plan'], note: '[redacted:sk]' }, 'applied in order, redacted');
  assert.equal(({} as Record<string, unknown>).polluted, undefined);
  const none = await runAgUi({ url: `${base}/ok`, input, timeoutMs: 2000 });
  assert.equal(none.state, undefined, 'no state event: no state to record');
});

test('langgraph sends the thread as forwardedProps.config.configurable.thread_id; crewai adds nothing', async () => {
  const agent = await startAgUiAgent({});
  try {
    const code = builtinHarnesses({ WORKER_ALLOWED_COMMANDS: undefined } as never).code!;
    const prompt = [{ role: 'user' as const, content: [{ type: 'text' as const, text: 'hi' }] }];
    for (const adapter of ['langgraph', 'crewai'] as const) {
      const harness = { ...code, adapter, endpointUrl: agent.url(adapter), keyEnvVar: null };
      const args = { agentRunId: 'run-lg', attempt: 1, history: () => [], nextRound: () => 1 };
      await remoteAgentModel(harness, args).model.doGenerate({ prompt, tools: [] } as never);
    }
    assert.deepEqual(agent.inputs.get('langgraph')![0]!.forwardedProps, {
      config: { configurable: { thread_id: 'run-lg' } },
    });
    assert.deepEqual(agent.inputs.get('crewai')![0]!.forwardedProps, {});
    assert.equal(agent.inputs.get('crewai')![0]!.threadId, 'run-lg');
  } finally {
    await agent.close();
  }
});

test("mission control's events of a checkpoint: its tool calls redacted and bounded", () => {
  const secret = 'sk-' + 'q'.repeat(40);
  const events = checkpointEvents('run', {
    checkpoint_seq: 1,
    step: 1,
    tool_history: [
      { round: 1, tool: 'write_file', input: { path: 'a', content: secret + 'x'.repeat(10_000) }, ok: true },
    ],
    files_touched: [{ path: 'a', sha256: null }],
    commit_oid: 'c',
    hash: 'h',
  });
  const args = events.find((e) => e.type === EventType.TOOL_CALL_ARGS)!.delta as string;
  assert.ok(!args.includes(secret) && args.includes('[redacted:sk]') && args.length <= 4_000, args.slice(0, 80));
  assert.deepEqual(
    events.map((e) => e.type),
    [
      'STEP_STARTED',
      'TOOL_CALL_START',
      'TOOL_CALL_ARGS',
      'TOOL_CALL_END',
      'TOOL_CALL_RESULT',
      'STEP_FINISHED',
      'STATE_SNAPSHOT',
    ],
  );
});
