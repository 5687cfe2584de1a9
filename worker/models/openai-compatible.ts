// A model behind any OpenAI chat-completions endpoint. The API key is read from the named
// environment variable on every request (so a rotated key is picked up) and lives only in
// the outgoing request's headers: no object here holds it, so logging the model leaks nothing.
// Only a variable matching WORKER_PROVIDER_KEY_VARS is ever read (key-vars.ts): checked when the
// model is made and again before each request, so nothing else can be sent as a bearer token.

import type { LanguageModelV3 } from '@ai-sdk/provider';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { EchodoError } from '../../core/errors.ts';
import { assertKeyVarAllowed, parseKeyVarGlobs } from '../../core/key-vars.ts';

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
}

export class MissingApiKeyError extends EchodoError {
  constructor(readonly variable: string) {
    super('model_unknown', `the API key variable ${variable} is not set in the worker's environment`);
    this.name = 'MissingApiKeyError';
  }
}

export function createOpenAICompatibleModel(options: OpenAICompatibleModelOptions): LanguageModelV3 {
  const { apiKeyEnvVar, model } = options;
  const env = options.env ?? process.env;
  const baseFetch = options.fetch ?? globalThis.fetch;
  const globs = options.keyVarGlobs ?? parseKeyVarGlobs();
  assertKeyVarAllowed(apiKeyEnvVar, globs);

  const fetchWithKey: typeof globalThis.fetch = async (input, init) => {
    const headers = new Headers(init?.headers);
    headers.delete('authorization');
    if (apiKeyEnvVar) {
      assertKeyVarAllowed(apiKeyEnvVar, globs);
      const key = env[apiKeyEnvVar];
      if (!key) throw new MissingApiKeyError(apiKeyEnvVar);
      headers.set('authorization', `Bearer ${key}`);
    }
    return baseFetch(input, { ...init, headers });
  };

  const provider = createOpenAICompatible({
    name: 'openai-compatible',
    baseURL: options.baseURL,
    fetch: fetchWithKey,
  });
  return provider.chatModel(model);
}
