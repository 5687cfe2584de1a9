// Models behind the providers' own APIs, through the ai SDK's packages: Anthropic's Messages API
// and OpenAI's default (Responses) API. Their endpoint is the SDK's unless the row names one (a
// proxy, or a loopback server in tests). The key goes through the same fetch as an
// OpenAI-compatible model's (key-fetch.ts): allowed variable, granted host, read per request.
import type { LanguageModelV3 } from '@ai-sdk/provider';
import { createAnthropic } from '@ai-sdk/anthropic';
import { createOpenAI } from '@ai-sdk/openai';
import { assertKeyVarAllowed, parseKeyVarGlobs } from '../../core/key-vars.ts';
import { assertKeyGranted, type KeyGrant } from '../../core/key-grants.ts';
import { keyFetch } from './key-fetch.ts';
import { nativeBaseUrl, type NativeProvider } from '../../core/providers.ts';

// The SDKs insist on a key of their own at construction; this stand-in is never sent, because
// key-fetch.ts replaces (or removes) the key headers of every request.
const STAND_IN_KEY = 'key-set-per-request';

export interface NativeModelOptions {
  provider: NativeProvider;
  /** null/undefined: the provider's own endpoint. */
  baseURL?: string | null;
  model: string;
  apiKeyEnvVar?: string | null;
  env?: NodeJS.ProcessEnv;
  fetch?: typeof globalThis.fetch;
  keyVarGlobs?: readonly string[];
  keyGrant?: KeyGrant;
}

export function createNativeModel(options: NativeModelOptions): LanguageModelV3 {
  const { provider, apiKeyEnvVar } = options;
  const baseURL = nativeBaseUrl(provider, options.baseURL);
  const globs = options.keyVarGlobs ?? parseKeyVarGlobs();
  assertKeyVarAllowed(apiKeyEnvVar, globs);
  if (apiKeyEnvVar) assertKeyGranted(apiKeyEnvVar, options.keyGrant, baseURL);
  const fetch = keyFetch({
    apiKeyEnvVar,
    header: provider === 'anthropic' ? 'x-api-key' : 'bearer',
    env: options.env ?? process.env,
    globs,
    keyGrant: options.keyGrant,
    fetch: options.fetch,
  });
  if (provider === 'anthropic') return createAnthropic({ baseURL, apiKey: STAND_IN_KEY, fetch })(options.model);
  return createOpenAI({ baseURL, apiKey: STAND_IN_KEY, fetch })(options.model);
}
