// A model behind any OpenAI chat-completions endpoint. The API key is read from the named
// environment variable on every request (so a rotated key is picked up) and lives only in
// the outgoing request's headers: no object here holds it, so logging the model leaks nothing.
// Only a variable matching WORKER_PROVIDER_KEY_VARS is ever read (key-vars.ts): checked when the
// model is made and again before each request, so nothing else can be sent as a bearer token.
// The key must also be granted to the row's workspace (core/key-grants.ts), and each request that
// carries it must go to a granted host; such a request never follows a redirect.

import type { LanguageModelV3 } from '@ai-sdk/provider';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { keyFetch, MissingApiKeyError } from './key-fetch.ts';
import { assertKeyVarAllowed, parseKeyVarGlobs } from '../../core/key-vars.ts';
import { assertKeyGranted, type KeyGrant } from '../../core/key-grants.ts';

export interface OpenAICompatibleModelOptions {
  baseURL: string;
  model: string;
  /** Name of the variable holding the key; null/undefined for endpoints without auth. */
  apiKeyEnvVar?: string | null;
  /** Read per request; defaults to process.env. */
  env?: NodeJS.ProcessEnv;
  /** The fetch to send through (tests); defaults to global fetch. */
  fetch?: typeof globalThis.fetch;
  /** Globs the key variable must match (WORKER_PROVIDER_KEY_VARS); defaults to the environment's, else *_API_KEY. */
  keyVarGlobs?: readonly string[];
  /** The workspace's grant of apiKeyEnvVar; without one, a keyed model is refused. */
  keyGrant?: KeyGrant;
}

export { MissingApiKeyError };

export function createOpenAICompatibleModel(options: OpenAICompatibleModelOptions): LanguageModelV3 {
  const { apiKeyEnvVar, model } = options;
  const env = options.env ?? process.env;
  const globs = options.keyVarGlobs ?? parseKeyVarGlobs();
  assertKeyVarAllowed(apiKeyEnvVar, globs);
  if (apiKeyEnvVar) assertKeyGranted(apiKeyEnvVar, options.keyGrant, options.baseURL);

  const fetchWithKey = keyFetch({
    apiKeyEnvVar,
    header: 'bearer',
    env,
    globs,
    keyGrant: options.keyGrant,
    fetch: options.fetch,
  });

  const provider = createOpenAICompatible({
    name: 'openai-compatible',
    baseURL: options.baseURL,
    fetch: fetchWithKey,
  });
  return provider.chatModel(model);
}
