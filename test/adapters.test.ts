// Agent adapters: a harness whose adapter is remote-ag-ui is run by a real AG-UI agent on loopback
// (test/support/ag-ui-agent.ts), through a real worker process. The worker executes the agent's
// tool calls in the run's worktree, checkpoints every round, sends the results back; hostile
// agents end their runs as documented while the daemon lives on.
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { EventType, type RunAgentInput } from '@ag-ui/core';
import { upsertHarness } from '../store/settings-edit.ts';
import { redactString } from '../core/redact.ts';
import { withWorkspace } from '../store/workspace.ts';
import { harnessInput } from '../operator/settings.ts';
import { createScenario, type Scenario } from './support/scenario.ts';
import { frame, startAgUiAgent, type AgentEntry, type AgUiAgent } from './support/ag-ui-agent.ts';
import { git } from './support/git.ts';
import { waitFor } from './support/child.ts';
import { spawnNode } from './support/child.ts';
import { HttpAgent } from '@ag-ui/client';
import { EventSchemas } from '@ag-ui/core/schemas';
import { createMissionControl, type RunningMissionControl } from '../mission-control/server.ts';
import { createWorkspaceToken } from '../store/tokens.ts';
import { createWorkspace } from '../store/runs.ts';
import { forkRun } from '../operator/fork.ts';
import { createLogger } from '../worker/log.ts';
import { grantKey } from './support/grants.ts';
import { registerStartupSecrets } from '../worker/secrets.ts';

const KEY_VAR = 'AGENT_TEST_API_KEY';
const KEY = 'sk-agent-test-5d41402abc4b2a76b9719d911017c592';

const GREET = 'export const greet = (n: string) => `hello ${n}`;\n';
const scripts: Record<string, AgentEntry[]> = {
  good: [
    { toolCalls: [{ name: 'write_file', args: JSON.stringify({ path: 'src/greet.ts', content: GREET }) }] },
    {
      toolCalls: [
        { name: 'read_file', args: JSON.stringify({ path: 'src/greet.ts' }) },
        { name: 'grep', args: JSON.stringify({ pattern: 'greet' }) },
      ],
    },
    { toolCalls: [{ name: 'run_command', args: JSON.stringify({ command: 'git status' }) }] },
    { text: 'Done.' },
  ],
  unknownTool: [{ toolCalls: [{ name: 'rm_rf', args: '{}' }] }, { text: 'Gave up.' }],
  badArgs: [{ toolCalls: [{ name: 'write_file', args: '{"path": "x.ts", "content": ' }] }, { text: 'Gave up.' }],
  runError: [
    {
      raw:
        frame({ type: EventType.RUN_STARTED, threadId: 't', runId: 'r' }) +
        frame({ type: EventType.RUN_ERROR, message: 'model overloaded' }),
    },
  ],
  cut: [
    {
      raw:
        frame({ type: EventType.RUN_STARTED, threadId: 't', runId: 'r' }) +
        'data: {"type":"TOOL_CALL_START","toolCallId":"a",',
    },
  ],
  flood: [
    {
      raw:
        frame({ type: EventType.RUN_STARTED, threadId: 't', runId: 'r' }) +
        Array.from({ length: 10_000 }, (_, i) => frame({ type: EventType.CUSTOM, name: 'noise', value: i })).join(''),
    },
  ],
  http500: [{ status: 500, body: 'internal error' }],
  // Never done: a tool round after another, until WORKER_MAX_TOOL_STEPS ends the run.
  endless: ['x', 'y', 'z'].map((f) => ({
    toolCalls: [{ name: 'write_file', args: JSON.stringify({ path: `${f}.txt`, content: `${f}\n` }) }],
  })),
  slow: [
    {
      toolCalls: [{ name: 'write_file', args: JSON.stringify({ path: 'a.txt', content: 'a\n' }) }],
      snapshot: { files: ['a.txt'], token: KEY },
    },
    {
      toolCalls: [{ name: 'write_file', args: JSON.stringify({ path: 'b.txt', content: 'b\n' }) }],
      delta: [
        { op: 'add', path: '/files/-', value: 'b.txt' },
        { op: 'add', path: '/round', value: 2 },
      ],
    },
    { toolCalls: [{ name: 'write_file', args: JSON.stringify({ path: 'c.txt', content: 'c\n' }) }], delayMs: 4000 },
    { text: 'Done.' },
  ],
};

let s: Scenario;
let agent: AgUiAgent;
let mc: RunningMissionControl;
let token: string;

before(async () => {
  s = await createScenario({ steps: [{ text: 'unused' }] });
  agent = await startAgUiAgent(scripts);
  await withWorkspace(s.t.db.app, s.workspaceId, async (tx) => {
    for (const name of Object.keys(scripts)) {
      await upsertHarness(
        tx,
        harnessInput({ alias: name, adapter: 'remote-ag-ui', url: agent.url(name), allow: ['git status'] }),
      );
    }
  });
  mc = await createMissionControl({
    db: s.t.db,
    config: s.config,
    queue: s.queue,
    logger: createLogger({ level: 'silent' }),
  }).start(0);
  token = await createWorkspaceToken(s.t.db.app, s.workspaceId);
});
after(async () => {
  await mc?.close();
  await s?.close();
  await agent?.close();
});

test("remote-ag-ui: the agent's calls run in the worktree, a checkpoint per round, each result goes back", async () => {
  const w = s.spawnWorker();
  const { agentRunId } = await s.dispatch({ harnessAlias: 'good', model: undefined });
  const run = await s.waitForStatus(agentRunId, 'completed');
  const rows = await s.checkpoints(agentRunId);
  assert.deepEqual(
    rows.map((r) => r.step),
    [1, 2, 3],
    'one checkpoint per tool round',
  );
  assert.equal(await git(run.worktree_path, 'show', 'HEAD:src/greet.ts'), GREET.trimEnd());
  const inputs = agent.inputs.get('good')!;
  assert.equal(inputs.length, 4, 'one AG-UI run per round, and the final one');
  assert.ok(
    inputs.every((i) => i.threadId === agentRunId),
    'the thread is the run',
  );
  assert.deepEqual(inputs[0]!.tools.map((t) => t.name).sort(), ['grep', 'read_file', 'run_command', 'write_file']);
  assert.equal((inputs[0]!.tools.find((t) => t.name === 'write_file')!.parameters as { type: string }).type, 'object');
  const last = inputs.at(-1)!;
  const results = last.messages.filter((m) => m.role === 'tool');
  assert.equal(results.length, 4, 'every tool result was sent back');
  assert.match(String(results[1]!.content), /"content":"export const greet/, 'read_file returned the file');
  assert.match(String(results[3]!.content), /On branch echodo\//, "git status ran in the run's worktree");
  assert.equal(last.messages.find((m) => m.role === 'user')!.content, 'Add a greeting module and a test for it.');
  await w.stop('SIGTERM');
});

test('hostile agents: bad calls go back as errors; RUN_ERROR, cut, flood, HTTP 500 fail; daemon lives', async () => {
  const w = s.spawnWorker({ WORKER_MAX_TOOL_STEPS: '2' });
  const ids: Record<string, string> = {};
  for (const name of ['unknownTool', 'badArgs', 'runError', 'cut', 'flood', 'http500', 'endless']) {
    ids[name] = (await s.dispatch({ harnessAlias: name, model: undefined })).agentRunId;
  }
  for (const name of ['unknownTool', 'badArgs']) {
    await s.waitForStatus(ids[name]!, 'completed');
    const sent = agent.inputs
      .get(name)!
      .at(-1)!
      .messages.filter((m) => m.role === 'tool');
    assert.equal(sent.length, 1, `${name}: the error went back to the agent`);
    assert.ok((sent[0] as { error?: string }).error, `${name}: marked as an error`);
    const [row] = await s.checkpoints(ids[name]!);
    assert.equal(row?.tool_history[0]?.ok, false, `${name}: the failed call is in the checkpoint`);
  }
  const reasons: Record<string, RegExp> = {
    runError: /reported an error: model overloaded/,
    cut: /ended in the middle of an event|without RUN_FINISHED/,
    flood: /more than \d+ events/,
    http500: /HTTP 500/,
  };
  for (const [name, reason] of Object.entries(reasons)) {
    const run = await s.waitForStatus(ids[name]!, 'failed');
    assert.match(run.failure_reason, reason, name);
  }
  await s.waitForStatus(ids.endless!, 'completed');
  assert.equal((await s.checkpoints(ids.endless!)).length, 2, 'WORKER_MAX_TOOL_STEPS rounds, each checkpointed');
  assert.equal(agent.inputs.get('endless')!.length, 2, 'no run asked of the agent past the budget');
  assert.equal(w.process.exitCode, null, 'the daemon is still running');
  await w.stop('SIGTERM');
});

async function cli(args: string[]) {
  const child = spawnNode('scripts/workspace.ts', args, { env: { ...s.env, [KEY_VAR]: KEY } });
  const { code } = await child.exited;
  return { code, out: child.stdout.join('\n'), err: child.stderr.join('\n') };
}

test('harness add --adapter --url --key-env; list shows the adapter; test probes; bad input refused', async () => {
  const W = ['--workspace', s.workspaceId];
  for (const [args, reason] of [
    [['harness', 'add', ...W, 'remote', '--adapter', 'remote-ag-ui'], /needs the agent's AG-UI endpoint/],
    [
      ['harness', 'add', ...W, 'remote', '--adapter', 'autogen', '--url', agent.url('good')],
      /adapter: unknown "autogen"/,
    ],
    [['harness', 'add', ...W, 'remote', '--adapter', 'remote-ag-ui', '--url', 'ftp://h/x'], /http or https/],
    [['harness', 'add', ...W, 'remote', '--url', agent.url('good')], /only a remote adapter has an endpoint/],
    [
      ['harness', 'add', ...W, 'remote', '--adapter', 'remote-ag-ui', '--url', agent.url('good'), '--key-env', KEY_VAR],
      /not granted/,
    ],
  ] as const) {
    const r = await cli([...args]);
    assert.equal(r.code, 2, `${args.join(' ')}: ${r.err}`);
    assert.match(r.err, reason);
  }
  await grantKey(s.su, s.workspaceId, KEY_VAR, ['127.0.0.1']);
  const add = await cli([
    'harness',
    'add',
    ...W,
    'remote',
    '--adapter',
    'langgraph',
    '--url',
    agent.url('good'),
    '--key-env',
    KEY_VAR,
  ]);
  assert.equal(add.code, 0, add.err);
  const listed = (await cli(['harness', 'list', ...W])).out.split('\n').map((l) => JSON.parse(l));
  const remote = listed.find((h) => h.alias === 'remote');
  assert.equal(remote.adapter, 'langgraph');
  assert.equal(remote.keyEnv, KEY_VAR);
  assert.equal(listed.find((h) => h.alias === 'good').adapter, 'remote-ag-ui');

  const before = agent.inputs.get('good')?.length ?? 0;
  const tested = await cli(['harness', 'test', ...W, 'remote']);
  assert.equal(tested.code, 0, tested.err);
  assert.match(tested.out, /"ok":true/);
  assert.equal(agent.authorizations.at(-1), `Bearer ${KEY}`, 'the granted key went to the endpoint');
  const probe = agent.inputs.get('good')!.at(-1)!;
  assert.equal(agent.inputs.get('good')!.length, before + 1, 'one probe call');
  assert.deepEqual(probe.tools, [], 'the probe offers no tool: nothing is executed');
  assert.ok(!tested.out.includes(KEY) && !tested.err.includes(KEY), 'the key is not printed');

  // A dead port: the probe fails with the reason, exit 1.
  const dead = agent.url('good').replace(/:\d+\//, ':9/');
  assert.equal((await cli(['harness', 'add', ...W, 'dead', '--adapter', 'remote-ag-ui', '--url', dead])).code, 0);
  const failed = await cli(['harness', 'test', ...W, 'dead']);
  assert.equal(failed.code, 1);
  assert.match(failed.out, /"ok":false,.*could not be reached/);
  const erroring = await cli(['harness', 'test', ...W, 'runError']);
  assert.equal(erroring.code, 1);
  assert.match(erroring.out, /model overloaded/);
  assert.equal((await cli(['harness', 'test', ...W, 'code'])).code, 0, 'a built-in harness is the minimal loop');
  assert.equal((await cli(['harness', 'test', ...W, 'nope'])).code, 2);
});

test('resume after SIGKILL: the same thread and state go on, no round runs twice; a fork keeps the state', async () => {
  const first = s.spawnWorker();
  // Dispatched and followed through POST /api/ag-ui: the crash reaches the client as CUSTOM events.
  const brief = 'Write three files.';
  const props = { harnessAlias: 'slow', convoyId: 'convoy-slow', baseRef: 'main', model: 'agent-own' };
  const posted = { threadId: 'slow', runId: 'slow-1', messages: [{ id: 'u', role: 'user', content: brief }] };
  const streamed = readSse(await postAgUi({ ...posted, forwardedProps: props }, token));
  const [dispatched] = await s.su`select id, convoy_id, job from agent_runs where job->>'brief' = ${brief}`;
  const agentRunId: string = dispatched!.id;
  assert.deepEqual(
    [dispatched!.convoy_id, dispatched!.job.baseRef, dispatched!.job.model],
    ['convoy-slow', 'main', 'agent-own'],
    'forwardedProps',
  );
  await waitFor(async () => ((agent.inputs.get('slow')?.length ?? 0) >= 3 ? true : undefined), {
    timeoutMs: 30_000,
    what: 'round 3 asked',
  });
  assert.equal((await s.checkpoints(agentRunId)).length, 2);
  await first.stop('SIGKILL');
  await waitFor(
    async () => {
      await s.sweep();
      return (await s.run(agentRunId)).status === 'queued' ? true : undefined;
    },
    { timeoutMs: 30_000, what: 're-dispatch' },
  );
  const second = s.spawnWorker();
  const run = await s.waitForStatus(agentRunId, 'completed');
  assert.equal(run.attempt, 2);
  assert.deepEqual(
    (await s.checkpoints(agentRunId)).map((r) => r.step),
    [1, 2, 3],
    'seqs without gaps or repeats',
  );
  assert.deepEqual(agent.roundsPlayed.get('slow')!.slice(0, 2), [0, 1], 'rounds 1 and 2 played once');
  assert.ok(
    !agent.roundsPlayed
      .get('slow')!
      .slice(2)
      .some((i) => i < 2),
    'no checkpointed round played again',
  );
  const executed = [first, second]
    .flatMap((w) => w.lines)
    .filter((l) => l.includes('"tool round done"') && l.includes(agentRunId)).length;
  assert.equal(executed, 3, 'three rounds executed across both workers');
  const resumedInput = agent.inputs.get('slow')!.find((i) => i.runId.startsWith(`${agentRunId}:2:`))!;
  assert.equal(resumedInput.threadId, agentRunId, 'the same thread');
  const replayed = resumedInput.messages.filter((m) => m.role === 'tool');
  assert.equal(replayed.length, 2, 'the two checkpointed rounds were re-sent with their results');
  // With the agent's own ids, the same on both attempts (a LangGraph thread merges them by id).
  const ids = (i: RunAgentInput) =>
    i.messages.flatMap((m) => (m.role === 'assistant' ? [m.id, ...(m.toolCalls ?? []).map((c) => c.id)] : []));
  const agentIds = [`msg-${agentRunId}:1:0`, `${agentRunId}:1:0-0`, `msg-${agentRunId}:1:1`, `${agentRunId}:1:1-0`];
  assert.deepEqual(ids(resumedInput), agentIds, 'after the resume');
  const round3 = agent.inputs.get('slow')!.find((i) => i.runId === `${agentRunId}:1:2`)!;
  assert.deepEqual(ids(round3), agentIds, 'before the kill');
  const results = (i: RunAgentInput) => i.messages.filter((m) => m.role === 'tool').map((m) => [m.id, m.toolCallId]);
  assert.deepEqual(results(resumedInput), results(round3));
  assert.ok((await s.events(agentRunId, 'run_resumed')).length >= 1, 'run_resumed recorded');
  // The flow's state (a snapshot, then a JSON Patch) is kept on each checkpoint, redacted, and sent back on resume.
  const recorded = (await s.checkpoints(agentRunId)).map((r) => r.agent_state);
  const expected = { files: ['a.txt', 'b.txt'], token: redactString(KEY), round: 2 };
  assert.notEqual(expected.token, KEY);
  const { threadId, state } = recorded[1];
  assert.deepEqual(
    { threadId, state },
    { threadId: agentRunId, state: expected },
    'the last checkpoint before the kill',
  );
  assert.deepEqual(resumedInput.state, expected, 'the state the agent got after the resume');
  for (const f of ['a.txt', 'b.txt', 'c.txt']) assert.ok(await git(run.worktree_path, 'show', `HEAD:${f}`));

  // The stream went on across the crash: the re-dispatch and the resume as CUSTOM events, never RUN_ERROR.
  const events = (await streamed).map((e) => JSON.parse(e.data) as { type: string; [k: string]: any });
  for (const e of events) assert.ok(EventSchemas.safeParse(e).success, `${e.type} validates`);
  assert.deepEqual([events[0]!.type, events.at(-1)!.type], [EventType.RUN_STARTED, EventType.RUN_FINISHED]);
  assert.ok(!events.some((e) => e.type === EventType.RUN_ERROR));
  const custom = events.filter((e) => e.type === EventType.CUSTOM).map((e) => e.name);
  assert.ok(custom.includes('run_redispatched') && custom.includes('run_resumed'), custom.join());
  const rows = await s.checkpoints(agentRunId);
  assert.deepEqual(
    events.filter((e) => e.type === EventType.STATE_SNAPSHOT).map((e) => e.snapshot),
    rows.map((r) => ({
      checkpointSeq: r.checkpoint_seq,
      commitOid: r.commit_oid,
      hash: r.hash,
      filesTouched: r.files_touched.map((f: { path: string; sha256: string | null }) => ({
        path: f.path,
        sha256: f.sha256,
      })),
    })),
    'a STATE_SNAPSHOT per checkpoint, as recorded',
  );

  // A fork from checkpoint 1: its agent starts from the state recorded there, on a thread of its own.
  const log = createLogger({ level: 'silent' });
  const fork = await forkRun(
    { db: s.t.db, queue: s.queue, config: s.config, log },
    { workspaceId: s.workspaceId, agentRunId, at: 1, by: 'cli' },
  );
  await s.waitForStatus(fork.agentRunId, 'completed');
  const forkInput = agent.inputs.get('slow')!.find((i) => i.runId === `${fork.agentRunId}:1:0`)!;
  assert.equal(forkInput.threadId, fork.agentRunId, "the fork's own thread");
  assert.deepEqual(forkInput.state, recorded[0].state, "the source's state at checkpoint 1");
  assert.deepEqual(ids(forkInput).slice(0, 2), agentIds.slice(0, 2), "round 1 under the agent's ids");
  await second.stop('SIGTERM');
});

test("a harness's key variable is redacted from start-up like a model key: never in a row or a log", async () => {
  // A name no pattern flags (a row written by hand, or under wider WORKER_PROVIDER_KEY_VARS elsewhere).
  const VAR = 'AGENT_HDR_CRED';
  const value = `hdr${Math.random().toString(36).slice(2)}${Date.now().toString(36)}`;
  await s.su`insert into harness_providers (workspace_id, alias, needs_worktree, adapter, endpoint_url, key_env_var)
             values (${s.workspaceId}, 'hdr', true, 'remote-ag-ui', ${agent.url('good')}, ${VAR})`;
  const file = path.join(s.repo, '..', 'hdr-job.json');
  const job = { workspaceId: s.workspaceId, convoyId: 'c', briefId: 'hdr', roleId: 'coder', baseRef: 'main' };
  await writeFile(file, JSON.stringify({ ...job, harnessAlias: 'hdr', brief: `use ${value} as the header` }));
  const child = spawnNode('scripts/dispatch.ts', ['--job', file], { env: { ...s.env, [VAR]: value } });
  const { code } = await child.exited;
  assert.equal(code, 0, child.stderr.join('\n'));
  const { agentRunId } = JSON.parse(child.stdout.join(''));
  const [row] = await s.su`select job->>'brief' as brief from agent_runs where id = ${agentRunId}`;
  assert.equal(row!.brief, `use [redacted:${VAR}] as the header`, 'the stored brief');
  await s.su`update agent_runs set status = 'cancelled', finished_at = now() where id = ${agentRunId}`;
  // In this process too: the start-up registration reads every workspace's harness key names.
  const lines: string[] = [];
  const log = createLogger({ level: 'info', destination: { write: (l: string) => void lines.push(l) } });
  log.info({ header: value }, `sending ${value}`);
  assert.ok(lines.join('').includes(value), 'not registered before start-up');
  await registerStartupSecrets(s.config, s.t.db, { [VAR]: value });
  lines.length = 0;
  log.info({ header: value }, `sending ${value}`);
  assert.ok(!lines.join('').includes(value) && lines.join('').includes(`[redacted:${VAR}]`), lines.join(''));
});

async function postAgUi(body: unknown, token?: string, headers: Record<string, string> = {}) {
  return fetch(`${mc.url}/api/ag-ui`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'text/event-stream',
      ...(token ? { authorization: `Bearer ${token}` } : {}),
      ...headers,
    },
    body: JSON.stringify(body),
  });
}

/** An SSE body's events (`id` and `data`), the first `max` only: then the connection is dropped. */
async function readSse(res: Response, max = Infinity): Promise<{ id?: string; data: string }[]> {
  assert.equal(res.status, 200);
  const events: { id?: string; data: string }[] = [];
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  while (events.length < max) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let end: number;
    while ((end = buffer.indexOf('\n\n')) >= 0 && events.length < max) {
      const lines = buffer.slice(0, end).split('\n');
      buffer = buffer.slice(end + 2);
      const id = lines.find((l) => l.startsWith('id: '))?.slice(4);
      events.push({ ...(id === undefined ? {} : { id }), data: lines.find((l) => l.startsWith('data: '))!.slice(6) });
    }
  }
  await reader.cancel();
  return events;
}

test("POST /api/ag-ui: HttpAgent gets a run's checkpoints as events; a reconnect resumes after its last", async () => {
  const w = s.spawnWorker();
  const brief = 'Write the greeting module.';
  const client = new HttpAgent({
    url: `${mc.url}/api/ag-ui`,
    headers: { authorization: `Bearer ${token}` },
    threadId: 'thread-1',
    initialMessages: [{ id: 'u1', role: 'user', content: brief }],
  });
  const events: { type: string; [k: string]: unknown }[] = [];
  await client.runAgent(
    { runId: 'run-1', forwardedProps: { harnessAlias: 'good' } },
    {
      onEvent: ({ event }) => void events.push(event as never),
    },
  );
  for (const e of events) assert.ok(EventSchemas.safeParse(e).success, `${e.type} validates`);
  const types = events.map((e) => e.type);
  assert.equal(types[0], EventType.RUN_STARTED);
  assert.equal(types.at(-1), EventType.RUN_FINISHED);
  const [run] = await s.su`select * from agent_runs where job->>'brief' = ${brief}`;
  assert.equal(run!.status, 'completed');
  const rows = await s.checkpoints(run!.id);
  const snapshots = events
    .filter((e) => e.type === EventType.STATE_SNAPSHOT)
    .map((e) => e.snapshot as Record<string, unknown>);
  assert.deepEqual(
    snapshots.map((x) => [x.checkpointSeq, x.hash, x.commitOid]),
    rows.map((r) => [r.checkpoint_seq, r.hash, r.commit_oid]),
  );
  assert.equal(types.filter((t) => t === EventType.STEP_STARTED).length, 3, 'a step per tool round');
  assert.equal(types.filter((t) => t === EventType.STEP_FINISHED).length, 3);
  const started = events.filter((e) => e.type === EventType.TOOL_CALL_START).map((e) => e.toolCallName);
  assert.deepEqual(
    started,
    rows.flatMap((r) => r.tool_history.map((h: { tool: string }) => h.tool)),
  );
  assert.equal(types.filter((t) => t === EventType.TOOL_CALL_RESULT).length, started.length);

  // The same threadId and runId again: the same run's events, each with an SSE id, no second run.
  const input = { threadId: 'thread-1', runId: 'run-1', messages: [{ id: 'u1', role: 'user', content: brief }] };
  const whole = await readSse(await postAgUi(input, token));
  assert.deepEqual(
    whole.map((e) => JSON.parse(e.data).type),
    types,
  );
  assert.equal(new Set(whole.map((e) => e.id)).size, whole.length, 'every event has its own id');
  // A client that read some events and dropped, then reconnected with Last-Event-ID: the next
  // event is the one after, nothing twice (cut inside a checkpoint's events, and between two).
  const firstSnapshot = whole.findIndex((e) => e.data.includes('"STATE_SNAPSHOT"'));
  for (const n of [3, firstSnapshot + 1]) {
    const head = await readSse(await postAgUi(input, token), n);
    assert.deepEqual(head, whole.slice(0, n));
    const tail = await readSse(await postAgUi(input, token, { 'last-event-id': head.at(-1)!.id! }));
    assert.deepEqual(tail, whole.slice(n), `reconnected after event ${n}: the rest, once`);
  }
  // An AG-UI client's repost names it in forwardedProps: RUN_STARTED again (its client expects it), then the rest.
  const reposted = await readSse(
    await postAgUi({ ...input, forwardedProps: { lastEventId: whole[firstSnapshot]!.id } }, token),
  );
  assert.deepEqual(reposted, [{ data: whole[0]!.data }, ...whole.slice(firstSnapshot + 1)]);
  // After the final event: an SSE reconnect reads nothing more, an AG-UI repost a well-formed run.
  const end = whole.at(-1)!;
  assert.deepEqual(await readSse(await postAgUi(input, token, { 'last-event-id': end.id! })), []);
  const afterEnd = await readSse(await postAgUi({ ...input, forwardedProps: { lastEventId: end.id } }, token));
  assert.deepEqual(afterEnd, [{ data: whole[0]!.data }, end], 'RUN_STARTED, then RUN_FINISHED');
  // The same reconnects through HttpAgent itself, whose client checks each run's order of events.
  const rerun = async (lastEventId: string) => {
    const got: string[] = [];
    await client.runAgent(
      { runId: 'run-1', forwardedProps: { lastEventId } },
      { onEvent: ({ event }) => void got.push(event.type) },
    );
    return got;
  };
  assert.deepEqual(await rerun(end.id!), [EventType.RUN_STARTED, EventType.RUN_FINISHED]);
  assert.deepEqual(await rerun(whole[firstSnapshot]!.id!), [types[0], ...types.slice(firstSnapshot + 1)]);
  const bogus = await postAgUi(input, token, { 'last-event-id': 'nope' });
  assert.equal(bogus.status, 400);
  // Another workspace's token reconnecting to this run: 404, nothing of the run streamed.
  await withWorkspace(s.t.db.app, 'other', (tx) => createWorkspace(tx));
  const other = await createWorkspaceToken(s.t.db.app, 'other');
  const foreign = await postAgUi(input, other, { 'last-event-id': whole[2]!.id! });
  assert.equal(foreign.status, 404);
  assert.equal((await postAgUi({ ...input, forwardedProps: { lastEventId: end.id } }, other)).status, 404);
  assert.equal(
    (await s.su`select count(*)::int as n from agent_runs where job->>'brief' = ${brief}`)[0]!.n,
    1,
    'no duplicate run',
  );
  const shown = (await (
    await fetch(`${mc.url}/api/runs/${run!.id}`, { headers: { authorization: `Bearer ${token}` } })
  ).json()) as { adapter: string; threadId: string };
  assert.deepEqual([shown.adapter, shown.threadId], ['remote-ag-ui', run!.id], 'the run shows its adapter and thread');
  const page = await (
    await fetch(`${mc.url}/runs/${run!.id}`, { headers: { authorization: `Bearer ${token}` } })
  ).text();
  const adapterLine = new RegExp(`data-testid="run-adapter">\\s*remote-ag-ui · thread ${run!.id}\\s*<`);
  assert.match(page, adapterLine, 'the run page');
  // A run that fails ends its stream with RUN_ERROR, the status as its code.
  const failing = { threadId: 't-err', runId: 'r-err', messages: [{ id: 'u', role: 'user', content: 'fail' }] };
  const failed = await readSse(await postAgUi({ ...failing, forwardedProps: { harnessAlias: 'runError' } }, token));
  const last = JSON.parse(failed.at(-1)!.data);
  assert.deepEqual([last.type, last.code], [EventType.RUN_ERROR, 'failed']);
  assert.match(last.message, /model overloaded/);
  // What the run was claimed with, not what its harness says today.
  const setAdapter = (adapter: string) =>
    s.su`update harness_providers set adapter = ${adapter} where workspace_id = ${s.workspaceId} and alias = 'good'`;
  await setAdapter('langgraph');
  try {
    const later = (await (
      await fetch(`${mc.url}/api/runs/${run!.id}`, { headers: { authorization: `Bearer ${token}` } })
    ).json()) as { adapter: string };
    assert.equal(later.adapter, 'remote-ag-ui', 'the adapter recorded at the claim');
  } finally {
    await setAdapter('remote-ag-ui');
  }
  await w.stop('SIGTERM');
});

test('POST /api/ag-ui: 401 without a token, 403 read-only, 400 for a bad RunAgentInput or no brief', async () => {
  const input = { threadId: 't', runId: 'r', messages: [{ id: 'u', role: 'user', content: 'hi' }] };
  assert.equal((await postAgUi(input)).status, 401);
  assert.equal((await postAgUi(input, 'not-a-token')).status, 401);
  const readOnly = await createWorkspaceToken(s.t.db.app, s.workspaceId, { readOnly: true });
  assert.equal((await postAgUi(input, readOnly)).status, 403);
  assert.equal((await postAgUi({ runId: 'r', messages: [] }, token)).status, 400);
  const noBrief = await postAgUi({ ...input, messages: [{ id: 'a', role: 'assistant', content: 'x' }] }, token);
  assert.equal(noBrief.status, 400);
  assert.match(await noBrief.text(), /last user message/);
  const badProp = await postAgUi({ ...input, forwardedProps: { harnessAlias: 7 } }, token);
  assert.equal(badProp.status, 400);
  const noModel = await postAgUi({ ...input, forwardedProps: { model: '' } }, token);
  assert.equal(noModel.status, 400);
  assert.match(await noModel.text(), /model must not be empty/);
  const foreignRepo = await postAgUi({ ...input, forwardedProps: { repoPath: path.join(s.repo, '..') } }, token);
  assert.equal(foreignRepo.status, 400);
  assert.match(await foreignRepo.text(), /not a repository registered to workspace/);
  const big = await postAgUi({ ...input, messages: [{ id: 'u', role: 'user', content: 'x'.repeat(100_000) }] }, token);
  assert.equal(big.status, 413, 'bodies are capped');
});

test('no model on a minimal harness: npm run dispatch refuses the job (exit 2), a worker fails it', async () => {
  const job = { workspaceId: s.workspaceId, convoyId: 'c', briefId: 'b', roleId: 'coder', baseRef: 'main' };
  const file = path.join(s.repo, '..', 'no-model-job.json');
  const dispatch = async (harnessAlias: string) => {
    await writeFile(file, JSON.stringify({ ...job, harnessAlias, brief: `brief for ${harnessAlias}` }));
    const child = spawnNode('scripts/dispatch.ts', ['--job', file], { env: s.env });
    return { code: (await child.exited).code, err: child.stderr.join('\n') };
  };
  const refused = await dispatch('code');
  assert.equal(refused.code, 2, refused.err);
  assert.match(refused.err, /model: the job names no model, and harness code runs the worker's own loop/);
  assert.equal((await dispatch('unknownTool')).code, 0, 'a remote adapter needs no model');
  // A job put on the queue past dispatch (as an orchestrator may) is failed by the worker with the reason.
  const w = s.spawnWorker();
  const { agentRunId } = await s.dispatch({ harnessAlias: 'code', model: undefined });
  const run = await s.waitForStatus(agentRunId, 'failed');
  assert.match(run.failure_reason, /names no model, and harness code runs the worker's own loop/);
  await w.stop('SIGTERM');
});
