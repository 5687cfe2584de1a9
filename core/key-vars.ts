// Which environment variables a model_providers row may name as its API key: only those matching
// WORKER_PROVIDER_KEY_VARS (comma-separated globs, default *_API_KEY). Without this a row could
// name DATABASE_URL and send the database's credentials, as a bearer token, to any base_url.
// Checked when a row is written (store/settings-lookup.ts) and again when it is used (resolve.ts,
// openai-compatible.ts), since rows written before the rule, or by hand, exist.
import { globToRegExp } from './redact.ts';
import { EchodoError } from './errors.ts';

export const DEFAULT_PROVIDER_KEY_VARS = '*_API_KEY';

/** The globs of a WORKER_PROVIDER_KEY_VARS value ("*_API_KEY, LLM_*"). */
export function parseKeyVarGlobs(spec: string | undefined = process.env.WORKER_PROVIDER_KEY_VARS): string[] {
  const globs = (spec?.trim() ? spec : DEFAULT_PROVIDER_KEY_VARS)
    .split(',')
    .map((g) => g.trim())
    .filter(Boolean);
  return globs.length ? globs : [DEFAULT_PROVIDER_KEY_VARS];
}

export function keyVarAllowed(name: string, globs: readonly string[]): boolean {
  return globs.some((g) => globToRegExp(g).test(name));
}

export class ProviderKeyVarRefusedError extends EchodoError {
  constructor(
    readonly variable: string,
    readonly globs: readonly string[],
  ) {
    super(
      'model_unknown',
      `api_key_env_var ${JSON.stringify(variable)} is refused: a model provider may only name a variable matching ` +
        `WORKER_PROVIDER_KEY_VARS (${globs.join(', ')})`,
    );
    this.name = 'ProviderKeyVarRefusedError';
  }
}

/** Throws ProviderKeyVarRefusedError unless `name` (when set) matches one of the globs. */
export function assertKeyVarAllowed(
  name: string | null | undefined,
  globs: readonly string[] = parseKeyVarGlobs(),
): void {
  if (name && !keyVarAllowed(name, globs)) throw new ProviderKeyVarRefusedError(name, globs);
}
