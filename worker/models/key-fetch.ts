// The fetch every keyed model sends through. The API key is read from the named environment
// variable on every request (so a rotated key is picked up) and lives only in the outgoing
// request's headers: no object here holds it, so logging a model leaks nothing. Only a variable
// matching WORKER_PROVIDER_KEY_VARS is read (key-vars.ts), and only for a request to a host the
// workspace's grant names (core/key-grants.ts); such a request never follows a redirect.
import path from 'node:path';
import { EchodoError } from '../../core/errors.ts';
import { assertKeyVarAllowed } from '../../core/key-vars.ts';
import { assertKeyGranted, type KeyGrant } from '../../core/key-grants.ts';

/** How a provider expects its key: OpenAI-style bearer, or Anthropic's own header. */
export type KeyHeader = 'bearer' | 'x-api-key';

/** Headers a provider SDK may have set from its own key setting: always replaced. */
const KEY_HEADERS = ['authorization', 'x-api-key'];

/**
 * Which process lacks the key: the worker, mission control (its model Test) or a CLI. Named by
 * the script it runs, so an operator sets the variable where it is missing.
 */
function processName(): string {
  const script = process.argv[1] ? path.basename(process.argv[1]).replace(/\.[cm]?[jt]s$/, '') : 'node';
  return `${script} (pid ${process.pid})`;
}

export class MissingApiKeyError extends EchodoError {
  constructor(readonly variable: string) {
    super('model_unknown', `the API key variable ${variable} is not set in the environment of ${processName()}`);
    this.name = 'MissingApiKeyError';
  }
}

export interface KeyFetchOptions {
  /** Name of the variable holding the key; null/undefined for endpoints without auth. */
  apiKeyEnvVar?: string | null;
  header: KeyHeader;
  env: NodeJS.ProcessEnv;
  globs: readonly string[];
  keyGrant?: KeyGrant;
  /** The fetch to send through (tests); defaults to global fetch. */
  fetch?: typeof globalThis.fetch;
}

export function keyFetch(options: KeyFetchOptions): typeof globalThis.fetch {
  const { apiKeyEnvVar, env, globs } = options;
  const baseFetch = options.fetch ?? globalThis.fetch;
  return async (input, init) => {
    const headers = new Headers(init?.headers);
    for (const h of KEY_HEADERS) headers.delete(h);
    if (!apiKeyEnvVar) return baseFetch(input, { ...init, headers });
    assertKeyVarAllowed(apiKeyEnvVar, globs);
    assertKeyGranted(apiKeyEnvVar, options.keyGrant, requestUrl(input));
    const key = env[apiKeyEnvVar];
    if (!key) throw new MissingApiKeyError(apiKeyEnvVar);
    if (options.header === 'bearer') headers.set('authorization', `Bearer ${key}`);
    else headers.set('x-api-key', key);
    // A redirect could take the key to a host the grant does not name.
    return baseFetch(input, { ...init, headers, redirect: 'error' });
  };
}

function requestUrl(input: Parameters<typeof globalThis.fetch>[0]): URL {
  if (input instanceof URL) return input;
  return new URL(typeof input === 'string' ? input : input.url);
}
