// Native providers (anthropic, openai) through the ai SDK's own packages, against loopback servers
// speaking the real wire formats: the key goes in each provider's own header and only to a granted
// host, usage comes back as the provider sent it, Anthropic prompts carry cache control on the
// system prompt and the conversation's stable head, and `model test` works for each.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { generateText, stepCountIs, streamText, tool } from 'ai';
import { z } from 'zod';
import { resolveModel, type ProviderRow } from '../worker/models/resolve.ts';
import { roundUsage } from '../worker/models/usage.ts';
import { KeyNotGrantedError } from '../core/key-grants.ts';
import { modelInput, SettingRefusedError, testModelProvider } from '../operator/settings.ts';
import { cachedSystem, cachedUser, withNewestCached } from '../worker/models/prompt-cache.ts';
import {
  startAnthropicServer,
  startOpenAIResponsesServer,
  type NativeScripted,
  type NativeServer,
} from './support/native-servers.ts';
import { createScenario } from './support/scenario.ts';
import { grantKey } from './support/grants.ts';
import { waitFor } from './support/child.ts';
import { runCost } from '../store/cost.ts';
import { withWorkspace } from '../store/workspace.ts';

const KEY_VAR = 'ECHODO_NATIVE_API_KEY';
const KEY = 'sk-native-test-key-1234567890';
const env = { [KEY_VAR]: KEY };
const grantAny = async (variable: string) => ({ variable, hosts: [] });

const ANTHROPIC_USAGE = [
  { input_tokens: 20, output_tokens: 7, cache_creation_input_tokens: 900, cache_read_input_tokens: 0 },
  { input_tokens: 35, output_tokens: 9, cache_creation_input_tokens: 60, cache_read_input_tokens: 900 },
  { input_tokens: 12, output_tokens: 4, cache_creation_input_tokens: 0, cache_read_input_tokens: 960 },
];
const OPENAI_USAGE = [
  {
    input_tokens: 500,
    input_tokens_details: { cached_tokens: 0 },
    output_tokens: 30,
    output_tokens_details: { reasoning_tokens: 10 },
    total_tokens: 530,
  },
  {
    input_tokens: 600,
    input_tokens_details: { cached_tokens: 384 },
    output_tokens: 20,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: 620,
  },
  {
    input_tokens: 640,
    input_tokens_details: { cached_tokens: 512 },
    output_tokens: 5,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: 645,
  },
];

const script = (usage: Record<string, unknown>[]): NativeScripted[] => [
  { toolCalls: [{ name: 'write_file', arguments: { path: 'a.ts', content: 'x' } }], usage: usage[0]! },
  { toolCalls: [{ name: 'read_file', arguments: { path: 'a.ts' } }], usage: usage[1]! },
  { text: 'Done.', usage: usage[2]! },
];

function tools() {
  const files = new Map<string, string>();
  return {
    write_file: tool({
      description: 'write a file',
      inputSchema: z.object({ path: z.string(), content: z.string() }),
      execute: async (i) => (files.set(i.path, i.content), { written: i.path }),
    }),
    read_file: tool({
      description: 'read a file',
      inputSchema: z.object({ path: z.string() }),
      execute: async (i) => ({ content: files.get(i.path) ?? null }),
    }),
  };
}

const row = (provider: 'anthropic' | 'openai', server: NativeServer | null, model: string): ProviderRow => ({
  alias: 'native',
  provider,
  base_url: server?.baseURL ?? null,
  model,
  api_key_env_var: KEY_VAR,
});

async function loop(provider: 'anthropic' | 'openai', server: NativeServer, model: string) {
  const { model: m } = await resolveModel({
    model: 'native',
    lookupProvider: async () => row(provider, server, model),
    lookupKeyGrant: grantAny,
    startAt: 0,
    env,
  });
  const usages: ReturnType<typeof roundUsage>[] = [];
  const result = await generateText({
    model: m,
    system: cachedSystem('You are the coder.'),
    messages: [cachedUser('write a.ts')],
    prepareStep: ({ messages }) => ({ messages: withNewestCached(messages) }),
    tools: tools(),
    stopWhen: stepCountIs(5),
    maxRetries: 0,
    onStepFinish: (step) => void usages.push(roundUsage(step.usage, step.response.modelId)),
  });
  return { result, usages };
}

test('an anthropic model runs the tool loop over the Messages API with its key in x-api-key and usage as sent', async (t) => {
  const server = await startAnthropicServer(script(ANTHROPIC_USAGE));
  t.after(() => server.close());
  const { result, usages } = await loop('anthropic', server, 'claude-sonnet-4-5');
  assert.equal(result.text, 'Done.');
  assert.equal(server.requests.length, 3);
  for (const req of server.requests) {
    assert.equal(req.url, '/v1/messages');
    assert.equal(req.headers['x-api-key'], KEY);
    assert.equal(req.headers.authorization, undefined, 'no bearer header');
    assert.ok(!JSON.stringify(req.body).includes(KEY), 'the key is never in the body');
    assert.equal(req.body.model, 'claude-sonnet-4-5');
    // The system prompt and the brief are cache breakpoints in every round.
    assert.deepEqual(req.body.system.at(-1).cache_control, { type: 'ephemeral' });
    assert.deepEqual(req.body.messages[0].content.at(-1).cache_control, { type: 'ephemeral' });
  }
  // From the second round on, the newest message (the tool results) is a breakpoint too.
  assert.deepEqual(server.requests[1]!.body.messages.at(-1).content.at(-1).cache_control, { type: 'ephemeral' });
  assert.deepEqual(
    usages.map((u) => [u.inputTokens, u.outputTokens, u.cacheReadTokens, u.cacheWriteTokens]),
    [
      [920, 7, 0, 900],
      [995, 9, 900, 60],
      [972, 4, 960, 0],
    ],
  );
  assert.equal(usages[0]!.modelId, 'claude-sonnet-4-5');
});

test('an openai model runs the tool loop over the Responses API with a bearer key and usage as sent', async (t) => {
  const server = await startOpenAIResponsesServer(script(OPENAI_USAGE));
  t.after(() => server.close());
  const { result, usages } = await loop('openai', server, 'gpt-5-mini');
  assert.equal(result.text, 'Done.');
  assert.equal(server.requests.length, 3);
  for (const req of server.requests) {
    assert.equal(req.url, '/v1/responses');
    assert.equal(req.headers.authorization, `Bearer ${KEY}`);
    assert.equal(req.headers['x-api-key'], undefined);
    assert.equal(req.body.model, 'gpt-5-mini');
  }
  assert.deepEqual(
    usages.map((u) => [u.inputTokens, u.outputTokens, u.cacheReadTokens, u.reasoningTokens]),
    [
      [500, 30, 0, 10],
      [600, 20, 384, 0],
      [640, 5, 512, 0],
    ],
  );
});

test('streaming answers of both providers carry the same usage', async (t) => {
  const anthropic = await startAnthropicServer([{ text: 'hi', usage: ANTHROPIC_USAGE[1]! }]);
  const openai = await startOpenAIResponsesServer([{ text: 'hi', usage: OPENAI_USAGE[1]! }]);
  t.after(() => Promise.all([anthropic.close(), openai.close()]));
  for (const [provider, server] of [
    ['anthropic', anthropic],
    ['openai', openai],
  ] as const) {
    const { model } = await resolveModel({
      model: 'native',
      lookupProvider: async () => row(provider, server, 'm-1'),
      lookupKeyGrant: grantAny,
      startAt: 0,
      env,
    });
    const stream = streamText({ model, prompt: 'say hi', maxRetries: 0 });
    assert.equal(await stream.text, 'hi');
    const usage = roundUsage(await stream.usage, 'm-1');
    if (provider === 'anthropic')
      assert.deepEqual([usage.inputTokens, usage.cacheReadTokens, usage.cacheWriteTokens], [995, 900, 60]);
    else assert.deepEqual([usage.inputTokens, usage.cacheReadTokens], [600, 384]);
    assert.equal(server.requests[0]!.body.stream, true);
  }
});

test('a native key goes only to a granted host: the default endpoint is the one checked when no base URL is set', async (t) => {
  const server = await startAnthropicServer(script(ANTHROPIC_USAGE));
  t.after(() => server.close());
  const grantFor = (hosts: string[]) => async (variable: string) => ({ variable, hosts });
  // Granted for the provider's own host only: a row pointing elsewhere is refused before any request.
  await assert.rejects(
    resolveModel({
      model: 'native',
      lookupProvider: async () => row('anthropic', server, 'm'),
      lookupKeyGrant: grantFor(['api.anthropic.com']),
      startAt: 0,
      env,
    }),
    KeyNotGrantedError,
  );
  await assert.rejects(
    resolveModel({ model: 'native', lookupProvider: async () => row('openai', null, 'm'), startAt: 0, env }),
    KeyNotGrantedError,
  );
  assert.equal(server.requests.length, 0);
  // No base URL: the SDK's endpoint, which the grant names.
  const resolved = await resolveModel({
    model: 'native',
    lookupProvider: async () => row('anthropic', null, 'm'),
    lookupKeyGrant: grantFor(['api.anthropic.com']),
    startAt: 0,
    env,
  });
  assert.match(resolved.description, /anthropic m at https:\/\/api\.anthropic\.com\/v1/);
});

test('model add accepts anthropic and openai without a base URL; openai-compatible still needs one', () => {
  const a = modelInput(
    { alias: 'claude', provider: 'anthropic', model: 'claude-sonnet-4-5', keyEnv: 'ANTHROPIC_API_KEY' },
    ['*_API_KEY'],
  );
  assert.deepEqual([a.provider, a.base_url], ['anthropic', null]);
  const o = modelInput({ alias: 'gpt', provider: 'openai', model: 'gpt-5', baseUrl: 'http://127.0.0.1:9/v1/' }, [
    '*_API_KEY',
  ]);
  assert.deepEqual([o.provider, o.base_url], ['openai', 'http://127.0.0.1:9/v1']);
  assert.throws(
    () => modelInput({ alias: 'x', provider: 'openai-compatible', model: 'm' }, ['*_API_KEY']),
    SettingRefusedError,
  );
  assert.throws(() => modelInput({ alias: 'x', provider: 'gemini', model: 'm' }, ['*_API_KEY']), /unknown kind/);
});

test('model test makes one minimal call to each native provider', async (t) => {
  const anthropic = await startAnthropicServer([{ text: 'ok', usage: ANTHROPIC_USAGE[0]! }]);
  const openai = await startOpenAIResponsesServer([{ text: 'ok', usage: OPENAI_USAGE[0]! }]);
  t.after(() => Promise.all([anthropic.close(), openai.close()]));
  const keyGrant = { variable: KEY_VAR, hosts: ['127.0.0.1'] };
  for (const [provider, server] of [
    ['anthropic', anthropic],
    ['openai', openai],
  ] as const) {
    const result = await testModelProvider(row(provider, server, 'm-test'), {
      keyVarGlobs: ['*_API_KEY'],
      keyGrant,
      env,
    });
    assert.equal(result.ok, true, JSON.stringify(result));
    assert.equal(server.requests.length, 1);
  }
  const failed = await testModelProvider(row('anthropic', anthropic, 'm-test'), {
    keyVarGlobs: ['*_API_KEY'],
    keyGrant,
    env,
  });
  assert.equal(failed.ok, false);
});

test("a worker run through an anthropic row records each round's usage and model id on its checkpoints", async (t) => {
  const server = await startAnthropicServer([
    {
      toolCalls: [{ name: 'write_file', arguments: { path: 'src/a.ts', content: 'export {};\n' } }],
      usage: ANTHROPIC_USAGE[0]!,
    },
    {
      toolCalls: [{ name: 'read_file', arguments: { path: 'src/a.ts' } }],
      usage: ANTHROPIC_USAGE[1]!,
      model: 'claude-sonnet-4-5-20250929',
    },
    { text: 'Done.', usage: ANTHROPIC_USAGE[2]! },
  ]);
  const s = await createScenario({ steps: [{ text: 'unused' }], workspaceId: 'native' });
  t.after(async () => {
    await s.close();
    await server.close();
  });
  await grantKey(s.su, s.workspaceId, KEY_VAR, ['127.0.0.1']);
  await s.su`insert into model_providers (workspace_id, alias, provider, base_url, model, api_key_env_var)
             values (${s.workspaceId}, 'claude', 'anthropic', ${server.baseURL}, 'claude-sonnet-4-5', ${KEY_VAR})`;
  const worker = s.spawnWorker({ [KEY_VAR]: KEY });
  await worker.waitForLine(/"worker started"/);
  const { agentRunId } = await s.dispatch({ model: 'claude' });
  const run = await waitFor(
    async () => {
      const r = await s.run(agentRunId);
      return ['completed', 'failed'].includes(r.status) ? r : undefined;
    },
    { timeoutMs: 40_000, what: 'the run to finish' },
  );
  assert.equal(run.status, 'completed', `${run.failure_reason}\n${worker.output()}`);
  const rows = await s.checkpoints(agentRunId);
  assert.deepEqual(
    rows.map((r) => [
      r.model_id,
      ...[r.input_tokens, r.output_tokens, r.cache_read_tokens, r.cache_write_tokens].map(Number),
      r.reasoning_tokens,
    ]),
    [
      ['claude-sonnet-4-5', 920, 7, 0, 900, null],
      ['claude-sonnet-4-5-20250929', 995, 9, 900, 60, null],
    ],
  );
  assert.ok(!worker.output().includes(KEY), 'the key is never logged');
  // The final text-only answer has no checkpoint: its usage is kept on the run, and priced with the rest.
  assert.equal(run.final_usage.cacheReadTokens, 960);
  // Priced from the shipped table: the dated id matches claude-sonnet-4-5.
  const cost = await withWorkspace(s.t.db.app, s.workspaceId, (tx) => runCost(tx, agentRunId));
  const final = 12 * 3 + 960 * 0.3 + 4 * 15;
  const expected = (20 * 3 + 900 * 3.75 + 7 * 15 + 35 * 3 + 900 * 0.3 + 60 * 3.75 + 9 * 15 + final) / 1e6;
  assert.ok(cost.costUsd !== null && Math.abs(cost.costUsd - expected) < 1e-12, `${cost.costUsd} ≈ ${expected}`);
});
