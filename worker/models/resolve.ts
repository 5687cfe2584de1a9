// Turns a job's `model` field into a LanguageModelV3: `replay:<absolute path>` is the offline
// transcript model (only inside WORKER_REPLAY_DIR); anything else is an alias in the workspace's
// model_providers, whose key variable must be granted to the workspace for the row's host.

import type { LanguageModelV3 } from '@ai-sdk/provider';
import { EchodoError } from '../../core/errors.ts';
import { createOpenAICompatibleModel } from './openai-compatible.ts';
import { createNativeModel } from './native.ts';
import { NATIVE_PROVIDERS, nativeBaseUrl, type NativeProvider } from '../../core/providers.ts';
import { ReplayModel } from './replay.ts';
import { loadTranscript } from './transcript.ts';
import { replayPathInside } from './replay-dir.ts';
import { assertKeyVarAllowed, parseKeyVarGlobs } from '../../core/key-vars.ts';
import { assertKeyGranted, type KeyGrant } from '../../core/key-grants.ts';

export const REPLAY_PREFIX = 'replay:';

/** A `replay:` model needs no model_providers row. */
export const isReplayModel = (model: string): boolean => model.startsWith(REPLAY_PREFIX);

/** A row of model_providers (workspace_id left out: the lookup is already workspace-scoped). */
export interface ProviderRow {
  alias: string;
  provider: 'openai-compatible' | NativeProvider;
  /** Optional for a native provider (its SDK's endpoint). */
  base_url: string | null;
  model: string;
  api_key_env_var: string | null;
}

export interface ResolveModelArgs {
  model: string;
  lookupProvider(alias: string): Promise<ProviderRow | undefined>;
  /** First transcript entry this session plays (replay only). */
  startAt: number;
  env?: NodeJS.ProcessEnv;
  /** Aborts a replay model's thinking delay (e.g. on shutdown or a lost lease). */
  signal?: AbortSignal;
  /** WORKER_PROVIDER_KEY_VARS as globs; defaults to the environment's, else *_API_KEY. */
  keyVarGlobs?: readonly string[];
  /** WORKER_REPLAY_DIR: the only folder replay transcripts are read from; unset refuses replay models. */
  replayDir?: string;
  /** The workspace's grant of a variable; absent (or answering undefined): no key is granted. */
  lookupKeyGrant?(variable: string): Promise<KeyGrant | undefined>;
}

export interface ResolvedModel {
  model: LanguageModelV3;
  /** Safe to log: names the model, never a key. */
  description: string;
  /** The variable the key is read from, for banners; never its value. */
  apiKeyEnvVar?: string;
}

export async function resolveModel(args: ResolveModelArgs): Promise<ResolvedModel> {
  if (isReplayModel(args.model)) {
    const path = args.model.slice(REPLAY_PREFIX.length);
    const transcript = await loadTranscript(await replayPathInside(path, args.replayDir));
    const model = new ReplayModel({ transcript, startAt: args.startAt, signal: args.signal, modelId: path });
    return { model, description: `replay:${path} (from entry ${args.startAt} of ${transcript.steps.length})` };
  }

  const row = await args.lookupProvider(args.model);
  if (!row) {
    throw new EchodoError('model_unknown', `model alias "${args.model}" is not in model_providers of this workspace`);
  }
  const native = (NATIVE_PROVIDERS as readonly string[]).includes(row.provider);
  if (!native && (row.provider !== 'openai-compatible' || !row.base_url)) {
    throw new EchodoError(
      'model_unknown',
      `model alias "${row.alias}" has unsupported provider "${String(row.provider)}"`,
    );
  }
  const baseURL = native ? nativeBaseUrl(row.provider as NativeProvider, row.base_url) : row.base_url!;
  // A row naming a variable outside WORKER_PROVIDER_KEY_VARS (DATABASE_URL, say), or one not granted
  // to this workspace for the row's host, fails the run here, before the variable is read or anything is sent.
  assertKeyVarAllowed(row.api_key_env_var, args.keyVarGlobs ?? parseKeyVarGlobs());
  const keyGrant = row.api_key_env_var ? await args.lookupKeyGrant?.(row.api_key_env_var) : undefined;
  if (row.api_key_env_var) assertKeyGranted(row.api_key_env_var, keyGrant, baseURL);
  const common = {
    model: row.model,
    apiKeyEnvVar: row.api_key_env_var,
    env: args.env,
    keyVarGlobs: args.keyVarGlobs,
    keyGrant,
  };
  const model = native
    ? createNativeModel({ ...common, provider: row.provider as NativeProvider, baseURL })
    : createOpenAICompatibleModel({ ...common, baseURL });
  return {
    model,
    description: `${row.alias}: ${row.provider} ${row.model} at ${baseURL}`,
    ...(row.api_key_env_var ? { apiKeyEnvVar: row.api_key_env_var } : {}),
  };
}
