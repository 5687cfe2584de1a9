import { test } from 'node:test';
import assert from 'node:assert/strict';
import { inspect } from 'node:util';
import { generateText, streamText, stepCountIs, tool } from 'ai';
import { z } from 'zod';
import { resolveModel, type ProviderRow } from '../worker/models/resolve.ts';
import { createOpenAICompatibleModel, MissingApiKeyError } from '../worker/models/openai-compatible.ts';
import { keyVarAllowed, parseKeyVarGlobs, ProviderKeyVarRefusedError } from '../core/key-vars.ts';
import { EchodoError } from '../core/errors.ts';
import { startChatServer, type ChatServer } from './support/chat-server.ts';

const KEY_VAR = 'ECHODO_TEST_LLM_API_KEY';

function providerRow(server: ChatServer, apiKeyEnvVar: string | null = KEY_VAR): ProviderRow {
  return {
    alias: 'local-llm',
    provider: 'openai-compatible',
    base_url: server.baseURL,
    model: 'test-model-1',
    api_key_env_var: apiKeyEnvVar,
  };
}

/** The operator's grant of any variable for any host: these tests are about the model, not grants. */
const grantAny = async (variable: string) => ({ variable, hosts: [] });

function lookupFor(row: ProviderRow) {
  return async (alias: string) => (alias === row.alias ? row : undefined);
}

function fileTools() {
  const files = new Map<string, string>();
  const executed: Array<{ tool: string; input: unknown }> = [];
  const tools = {
    write_file: tool({
      description: 'write a file',
      inputSchema: z.object({ path: z.string(), content: z.string() }),
      execute: async (input) => {
        executed.push({ tool: 'write_file', input });
        files.set(input.path, input.content);
        return { written: input.path };
      },
    }),
    read_file: tool({
      description: 'read a file',
      inputSchema: z.object({ path: z.string() }),
      execute: async (input) => {
        executed.push({ tool: 'read_file', input });
        return { content: files.get(input.path) ?? null };
      },
    }),
  };
  return { tools, executed };
}

const toolScript = () => [
  { toolCalls: [{ name: 'write_file', arguments: { path: 'greet.ts', content: 'export const hi = 1;' } }] },
  { toolCalls: [{ name: 'read_file', arguments: { path: 'greet.ts' } }] },
  { text: 'All done.' },
];

test('generateText runs the tool calls an OpenAI-compatible server asks for and returns its final text', async (t) => {
  const server = await startChatServer(toolScript());
  t.after(() => server.close());
  const key = 'sk-test-first-1234567890';
  const env = { [KEY_VAR]: key };

  const resolved = await resolveModel({
    model: 'local-llm',
    lookupKeyGrant: grantAny,
    lookupProvider: lookupFor(providerRow(server)),
    startAt: 0,
    env,
  });
  assert.equal(resolved.apiKeyEnvVar, KEY_VAR);
  assert.ok(!resolved.description.includes(key), '!resolved.description.includes(key)');

  const { tools, executed } = fileTools();
  const stepToolResults: unknown[] = [];
  const result = await generateText({
    model: resolved.model,
    tools,
    prompt: 'write greet.ts',
    stopWhen: stepCountIs(5),
    maxRetries: 0,
    onStepFinish: (step) => {
      stepToolResults.push(step.toolResults.map((r) => r.output));
    },
  });

  assert.equal(result.text, 'All done.');
  assert.deepEqual(executed, [
    { tool: 'write_file', input: { path: 'greet.ts', content: 'export const hi = 1;' } },
    { tool: 'read_file', input: { path: 'greet.ts' } },
  ]);
  assert.deepEqual(stepToolResults, [[{ written: 'greet.ts' }], [{ content: 'export const hi = 1;' }], []]);

  assert.equal(server.requests.length, 3);
  for (const req of server.requests) {
    assert.equal(req.url, '/v1/chat/completions');
    assert.equal(req.headers.authorization, `Bearer ${key}`);
    assert.equal(req.body.model, 'test-model-1');
    // The key travels only in the Authorization header, never in the body.
    assert.ok(!JSON.stringify(req.body).includes(key), '!JSON.stringify(req.body).includes(key)');
  }
  assert.deepEqual(server.requests[0]!.body.tools.map((t: any) => t.function.name).sort(), ['read_file', 'write_file']);
  // The second request carries the first tool's result back to the model.
  const toolMessage = server.requests[1]!.body.messages.find((m: any) => m.role === 'tool');
  assert.equal(toolMessage.tool_call_id, 'call_1_0');
  assert.deepEqual(JSON.parse(toolMessage.content), { written: 'greet.ts' });
});

test('the model object holds no key, so logging it cannot leak one', async (t) => {
  const server = await startChatServer([]);
  t.after(() => server.close());
  const key = 'sk-never-in-objects-0987654321';
  const resolved = await resolveModel({
    model: 'local-llm',
    lookupKeyGrant: grantAny,
    lookupProvider: lookupFor(providerRow(server)),
    startAt: 0,
    env: { [KEY_VAR]: key },
  });
  assert.ok(
    !inspect(resolved, { depth: 20, showHidden: true }).includes(key),
    '!inspect(resolved, { depth: 20, showHidden: true }).includes(key)',
  );
});

test('with the key variable unset the call fails naming the variable, and sends nothing', async (t) => {
  const server = await startChatServer(toolScript());
  t.after(() => server.close());
  const otherSecret = 'sk-unrelated-secret-555';
  const env: NodeJS.ProcessEnv = { OTHER_LLM_KEY: otherSecret };
  const { model } = await resolveModel({
    model: 'local-llm',
    lookupKeyGrant: grantAny,
    lookupProvider: lookupFor(providerRow(server)),
    startAt: 0,
    env,
  });

  await assert.rejects(
    generateText({ model, tools: fileTools().tools, prompt: 'x', maxRetries: 0 }),
    (err: unknown) => {
      assert.ok(err instanceof MissingApiKeyError, 'err instanceof MissingApiKeyError');
      assert.ok(err instanceof EchodoError, 'err instanceof EchodoError');
      assert.ok(err.message.includes(KEY_VAR), err.message);
      // It names the process whose environment lacks the key (here the test runner, not a worker).
      assert.match(err.message, new RegExp(`environment of \\S+ \\(pid ${process.pid}\\)`));
      assert.ok(!err.message.includes(otherSecret), '!err.message.includes(otherSecret)');
      assert.ok(!/sk-/.test(inspect(err)), '!/sk-/.test(inspect(err))');
      return true;
    },
  );
  assert.equal(server.requests.length, 0);

  // An empty value counts as unset.
  env[KEY_VAR] = '';
  await assert.rejects(generateText({ model, prompt: 'x', maxRetries: 0 }), new RegExp(KEY_VAR));
  assert.equal(server.requests.length, 0);
});

test('the key is read at call time: changing the variable between calls sends the new key', async (t) => {
  const server = await startChatServer([{ text: 'first' }, { text: 'second' }]);
  t.after(() => server.close());
  const previous = process.env[KEY_VAR];
  t.after(() => {
    if (previous === undefined) delete process.env[KEY_VAR];
    else process.env[KEY_VAR] = previous;
  });

  process.env[KEY_VAR] = 'sk-before-rotation-111';
  // No env passed: the model reads process.env, as the worker does.
  const { model } = await resolveModel({
    model: 'local-llm',
    lookupKeyGrant: grantAny,
    lookupProvider: lookupFor(providerRow(server)),
    startAt: 0,
  });
  assert.equal((await generateText({ model, prompt: 'one', maxRetries: 0 })).text, 'first');

  process.env[KEY_VAR] = 'sk-after-rotation-222';
  assert.equal((await generateText({ model, prompt: 'two', maxRetries: 0 })).text, 'second');

  assert.deepEqual(
    server.requests.map((r) => r.headers.authorization),
    ['Bearer sk-before-rotation-111', 'Bearer sk-after-rotation-222'],
  );
});

test('a provider row without api_key_env_var sends no Authorization header', async (t) => {
  const server = await startChatServer([{ text: 'open endpoint' }]);
  t.after(() => server.close());
  const { model, apiKeyEnvVar } = await resolveModel({
    model: 'local-llm',
    lookupKeyGrant: grantAny,
    lookupProvider: lookupFor(providerRow(server, null)),
    startAt: 0,
    env: {},
  });
  assert.equal(apiKeyEnvVar, undefined);
  assert.equal((await generateText({ model, prompt: 'x', maxRetries: 0 })).text, 'open endpoint');
  assert.equal(server.requests[0]!.headers.authorization, undefined);
});

test('streamText works against the same server over SSE', async (t) => {
  const server = await startChatServer(toolScript());
  t.after(() => server.close());
  const key = 'sk-stream-333';
  const { model } = await resolveModel({
    model: 'local-llm',
    lookupKeyGrant: grantAny,
    lookupProvider: lookupFor(providerRow(server)),
    startAt: 0,
    env: { [KEY_VAR]: key },
  });
  const { tools, executed } = fileTools();
  const result = streamText({ model, tools, prompt: 'x', stopWhen: stepCountIs(5), maxRetries: 0 });
  assert.equal(await result.text, 'All done.');
  assert.deepEqual(
    executed.map((e) => e.tool),
    ['write_file', 'read_file'],
  );
  assert.ok(
    server.requests.every((r) => r.body.stream === true && r.headers.authorization === `Bearer ${key}`),
    'server.requests.every((r) => r.body.stream === true && r.headers.authorization =',
  );
});

test('a server error surfaces as an error, not as a silent empty answer', async (t) => {
  const server = await startChatServer([{ status: 400, error: 'model test-model-1 does not exist' }]);
  t.after(() => server.close());
  const { model } = await resolveModel({
    model: 'local-llm',
    lookupKeyGrant: grantAny,
    lookupProvider: lookupFor(providerRow(server)),
    startAt: 0,
    env: { [KEY_VAR]: 'sk-err-444' },
  });
  await assert.rejects(generateText({ model, prompt: 'x', maxRetries: 0 }), /does not exist/);
});

test('a provider row naming a variable outside WORKER_PROVIDER_KEY_VARS is refused before anything is sent', async (t) => {
  const server = await startChatServer([{ text: 'must not be reached' }]);
  t.after(() => server.close());
  const env = {
    DATABASE_URL: 'postgres://postgres:db-password-0123456789@127.0.0.1:5432/echodo',
    [KEY_VAR]: 'sk-fine-0123456789abcdef',
  };
  for (const keyVarGlobs of [undefined, ['*_API_KEY'], ['LLM_*', '*_TOKEN']]) {
    await assert.rejects(
      resolveModel({
        model: 'local-llm',
        lookupKeyGrant: grantAny,
        lookupProvider: lookupFor(providerRow(server, 'DATABASE_URL')),
        startAt: 0,
        env,
        keyVarGlobs,
      }),
      (err: unknown) => {
        assert.ok(err instanceof ProviderKeyVarRefusedError, `refused with the typed error: ${String(err)}`);
        assert.ok(err instanceof EchodoError, 'an EchodoError, so the run fails with its message');
        assert.match(err.message, /"DATABASE_URL" is refused/, err.message);
        assert.match(
          err.message,
          new RegExp(
            `WORKER_PROVIDER_KEY_VARS \\(${(keyVarGlobs ?? ['*_API_KEY']).join(', ').replace(/\*/g, '\\*')}\\)`,
          ),
          err.message,
        );
        assert.ok(!err.message.includes('db-password'), 'the refusal never holds the value');
        return true;
      },
    );
  }
  // The same row through the model factory directly (a caller that skipped resolveModel).
  assert.throws(
    () =>
      createOpenAICompatibleModel({
        baseURL: server.baseURL,
        model: 'm',
        apiKeyEnvVar: 'DATABASE_URL',
        env,
        keyVarGlobs: ['*_API_KEY'],
      }),
    ProviderKeyVarRefusedError,
  );
  assert.equal(server.requests.length, 0, 'the loopback server was sent nothing');

  // A variable matching a custom glob is accepted and sent.
  const { model } = await resolveModel({
    model: 'local-llm',
    lookupKeyGrant: grantAny,
    lookupProvider: lookupFor(providerRow(server, 'LLM_ACCESS')),
    startAt: 0,
    env: { LLM_ACCESS: 'custom-value-1234' },
    keyVarGlobs: ['*_API_KEY', 'LLM_*'],
  });
  assert.equal((await generateText({ model, prompt: 'x', maxRetries: 0 })).text, 'must not be reached');
  assert.equal(server.requests[0]!.headers.authorization, 'Bearer custom-value-1234');
});

test('WORKER_PROVIDER_KEY_VARS globs: * and ? match within a name, the default is *_API_KEY', () => {
  assert.deepEqual(parseKeyVarGlobs(undefined), ['*_API_KEY']);
  assert.deepEqual(parseKeyVarGlobs(' *_API_KEY , LLM_? '), ['*_API_KEY', 'LLM_?']);
  assert.ok(keyVarAllowed('OPENAI_API_KEY', ['*_API_KEY']));
  assert.ok(!keyVarAllowed('DATABASE_URL', ['*_API_KEY']));
  assert.ok(!keyVarAllowed('OPENAI_API_KEY_FILE', ['*_API_KEY']), 'a glob matches the whole name');
  assert.ok(keyVarAllowed('LLM_A', ['LLM_?']) && !keyVarAllowed('LLM_AB', ['LLM_?']));
  assert.ok(!keyVarAllowed('X.API_KEY', ['X_API_KEY']), 'regex characters in a name are literal');
});
