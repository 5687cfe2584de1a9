// Start-up registration of secrets with the redactor (core/redact.ts), for every process
// that persists or logs (worker, stall detector, mission control, dispatch):
//  - the credentials inside DATABASE_URL, DATABASE_APP_URL, REDIS_URL, WORKER_CHECKPOINT_REMOTE
//    and the URLs the process actually connects with (the embedded server's password included);
//  - every variable named by ANY workspace's model_providers.api_key_env_var (names read through
//    a security-definer function, values from this process's environment), so a variable whose
//    name lacks KEY/TOKEN/SECRET/PASSWORD is known before any run of its workspace executes here;
//  - every variable whose name looks secret or matches WORKER_PROVIDER_KEY_VARS.
// Fail closed: if the names cannot be read, start-up fails (the caller exits with the reason).
import { readFileSync } from 'node:fs';
import path from 'node:path';
import type { Database } from '../store/connection.ts';
import { allApiKeyEnvVars } from '../store/settings-lookup.ts';
import {
  registerSecret,
  registerSecretsFromEnv,
  registerUrlCredentials,
  registeredSecretCount,
} from '../core/redact.ts';
import type { Config } from '../core/config.ts';
import { EchodoError } from '../core/errors.ts';
import { parseKeyVarGlobs } from '../core/key-vars.ts';
import { remoteForGit } from './git/run-git.ts';

type SecretConfig = Pick<
  Config,
  'DATABASE_URL' | 'DATABASE_APP_URL' | 'REDIS_URL' | 'WORKER_CHECKPOINT_REMOTE' | 'WORKER_PROVIDER_KEY_VARS'
> &
  Partial<Pick<Config, 'ECHODO_HOME'>>;

/** Registers what needs no database: the configured URLs' credentials and the environment's secret-looking variables. */
export function registerConfigSecrets(config: SecretConfig, env: NodeJS.ProcessEnv = process.env): void {
  registerUrlCredentials({
    DATABASE_URL: config.DATABASE_URL,
    DATABASE_APP_URL: config.DATABASE_APP_URL,
    REDIS_URL: config.REDIS_URL,
    WORKER_CHECKPOINT_REMOTE: config.WORKER_CHECKPOINT_REMOTE,
  });
  // The remote's credentials reach git through the environment only, in every process (a partial
  // clone fetches blobs whenever any git of this process reads one it lacks).
  if (config.WORKER_CHECKPOINT_REMOTE) remoteForGit(config.WORKER_CHECKPOINT_REMOTE);
  registerSecretsFromEnv(env, [], parseKeyVarGlobs(config.WORKER_PROVIDER_KEY_VARS));
  // The embedded server's superuser password (store/embedded.ts keeps it in <home>/pg/password):
  // this process never sees that URL once the app login is derived, but a command could print it.
  if (!config.DATABASE_URL && config.ECHODO_HOME) {
    const password = readIfPresent(path.join(config.ECHODO_HOME, 'pg', 'password'));
    registerSecret(password, 'embedded superuser password');
    if (password) registerSecret(encodeURIComponent(password), 'embedded superuser password');
  }
}

function readIfPresent(file: string): string | undefined {
  try {
    return readFileSync(file, 'utf8').trim() || undefined;
  } catch {
    return undefined; // not created yet: openDatabase creates it, and registerStartupSecrets reads it again
  }
}

/** Everything of registerConfigSecrets, plus the URLs `db` connects with and every workspace's key variables. */
export async function registerStartupSecrets(
  config: SecretConfig,
  db: Database,
  env: NodeJS.ProcessEnv = process.env,
): Promise<{ registered: number }> {
  registerConfigSecrets(config, env);
  // The URL actually used (embedded: a generated superuser password) and any other connection URL
  // the database object carries (the app login's, when derived).
  const urls: Record<string, string | undefined> = {};
  for (const [k, v] of Object.entries(db)) if (typeof v === 'string' && /url$/i.test(k)) urls[`database ${k}`] = v;
  registerUrlCredentials(urls);
  let names: string[];
  try {
    names = await allApiKeyEnvVars(db.admin);
  } catch (err) {
    throw new EchodoError(
      'internal',
      `could not read the model providers' key variable names to redact them: ${(err as Error).message}`,
      { cause: err },
    );
  }
  registerSecretsFromEnv(env, names, parseKeyVarGlobs(config.WORKER_PROVIDER_KEY_VARS));
  return { registered: registeredSecretCount() };
}
