// Validation of a workspace's settings (models, harnesses, routes) and the model Test: one
// minimal call (a one-token completion, 10 s at most) that answers ok with its latency, or the
// error, redacted. Shared by `npm run workspace` and the Settings page, so both refuse the same
// input with the same reason.
import { generateText } from 'ai';
import {
  HARNESS_ADAPTERS,
  type HarnessAdapter,
  type HarnessRow,
  type ModelProviderRow,
} from '../store/settings-lookup.ts';
import type { RouteRow } from '../store/settings-edit.ts';
import { redactString } from '../core/redact.ts';
import { EchodoError, errorMessage, errorWithCauses } from '../core/errors.ts';
import { assertKeyVarAllowed } from '../core/key-vars.ts';
import { createOpenAICompatibleModel } from '../worker/models/openai-compatible.ts';
import { createNativeModel } from '../worker/models/native.ts';
import type { KeyGrant } from '../core/key-grants.ts';
import { probeAgUiEndpoint, type ProbeResult } from '../worker/adapters/probe.ts';

export const PROVIDER_KINDS = ['openai-compatible', 'anthropic', 'openai'] as const;
export const MODEL_TEST_TIMEOUT_MS = 10_000;
const NAME = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$/;

/** A setting refused, with the reason (exit 2 on the command line, 400 on the Settings page). */
export class SettingRefusedError extends EchodoError {
  constructor(message: string) {
    super('invalid_job', message);
    this.name = 'SettingRefusedError';
  }
}

function name(what: string, value: string | undefined): string {
  if (!value || !NAME.test(value))
    throw new SettingRefusedError(
      `${what}: ${JSON.stringify(value ?? '')} must be 1-200 letters, digits, '.', '_', ':' or '-'`,
    );
  return value;
}

export function modelInput(
  input: { alias?: string; provider?: string; baseUrl?: string; model?: string; keyEnv?: string },
  keyVarGlobs: readonly string[],
): ModelProviderRow {
  const alias = name('alias', input.alias);
  if (alias.startsWith('replay')) throw new SettingRefusedError(`alias: "${alias}" would be read as a replay model`);
  const provider = (input.provider?.trim() || 'openai-compatible') as ModelProviderRow['provider'];
  if (!(PROVIDER_KINDS as readonly string[]).includes(provider)) {
    throw new SettingRefusedError(`provider: unknown kind "${provider}" (known: ${PROVIDER_KINDS.join(', ')})`);
  }
  // A native provider's SDK knows its endpoint; an OpenAI-compatible one has none to fall back on.
  const baseUrl = input.baseUrl?.trim() ? baseUrlInput(input.baseUrl) : null;
  if (!baseUrl && provider === 'openai-compatible')
    throw new SettingRefusedError('base URL: required for openai-compatible');
  const model = input.model?.trim();
  if (!model || model.length > 200)
    throw new SettingRefusedError("model: the provider's model name is required (at most 200 characters)");
  const keyEnv = input.keyEnv?.trim() || null;
  if (keyEnv && !/^[A-Za-z_][A-Za-z0-9_]*$/.test(keyEnv))
    throw new SettingRefusedError(`key variable: ${JSON.stringify(keyEnv)} is not a variable name`);
  try {
    assertKeyVarAllowed(keyEnv, keyVarGlobs);
  } catch (err) {
    throw new SettingRefusedError(errorMessage(err));
  }
  return { alias, provider, base_url: baseUrl, model, api_key_env_var: keyEnv };
}

function baseUrlInput(raw: string): string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new SettingRefusedError(`base URL: ${JSON.stringify(redactString(raw))} is not a URL`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new SettingRefusedError(`base URL: must be http or https, not ${url.protocol}`);
  if (url.username || url.password)
    throw new SettingRefusedError('base URL: must not carry credentials; name a key variable instead');
  return url.toString().replace(/\/$/, '');
}

export interface HarnessInput {
  alias?: string;
  worktree?: boolean;
  allow?: string[];
  writePrefix?: string[];
  adapter?: string;
  url?: string;
  keyEnv?: string;
}

export function harnessInput(input: HarnessInput, keyVarGlobs?: readonly string[]): HarnessRow {
  const alias = name('alias', input.alias);
  const { adapter, endpointUrl, keyEnvVar } = adapterInput(input, keyVarGlobs);
  const allowed = (input.allow ?? []).map((c) => c.trim()).filter(Boolean);
  for (const c of allowed)
    if (c.length > 200 || /[\0\n]/.test(c))
      throw new SettingRefusedError(
        `allowed command ${JSON.stringify(c.slice(0, 40))} is not one line of at most 200 characters`,
      );
  const prefixes = (input.writePrefix ?? []).map((p) => p.trim()).filter(Boolean);
  for (const p of prefixes) {
    if (p.startsWith('/') || p.split('/').includes('..') || /[\0\n]/.test(p))
      throw new SettingRefusedError(`write prefix ${JSON.stringify(p)} must be a relative path inside the root`);
  }
  const needsWorktree = input.worktree ?? true;
  if (!needsWorktree && allowed.length) {
    // Without a worktree its commands would run in the repository root, whose every file they could write.
    throw new SettingRefusedError(
      'allowed commands: a harness without a worktree cannot run commands (no --allow with --no-worktree)',
    );
  }
  return {
    alias,
    needs_worktree: needsWorktree,
    allowed_commands: allowed,
    write_prefixes: prefixes.length ? prefixes : null,
    adapter,
    endpoint_url: endpointUrl,
    key_env_var: keyEnvVar,
  };
}

/** The adapter part of a harness: a remote adapter needs an http(s) URL; a key variable needs one too. */
function adapterInput(
  input: HarnessInput,
  keyVarGlobs?: readonly string[],
): { adapter: HarnessAdapter; endpointUrl: string | null; keyEnvVar: string | null } {
  const adapter = (input.adapter?.trim() || 'minimal') as HarnessAdapter;
  if (!HARNESS_ADAPTERS.includes(adapter)) {
    const known = HARNESS_ADAPTERS.join(', ');
    throw new SettingRefusedError(`adapter: unknown ${JSON.stringify(adapter)} (known: ${known})`);
  }
  const rawUrl = input.url?.trim() || null;
  const keyEnvVar = input.keyEnv?.trim() || null;
  if (adapter === 'minimal') {
    if (rawUrl || keyEnvVar) {
      throw new SettingRefusedError('url and key variable: only a remote adapter has an endpoint');
    }
    return { adapter, endpointUrl: null, keyEnvVar: null };
  }
  if (!rawUrl) throw new SettingRefusedError(`url: the ${adapter} adapter needs the agent's AG-UI endpoint (--url)`);
  let url: URL;
  try {
    url = new URL(rawUrl);
  } catch {
    throw new SettingRefusedError(`url: ${JSON.stringify(redactString(rawUrl))} is not a URL`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new SettingRefusedError(`url: must be http or https, not ${url.protocol}`);
  }
  if (url.username || url.password) {
    throw new SettingRefusedError('url: must not carry credentials; name a key variable instead');
  }
  if (keyEnvVar && !/^[A-Za-z_][A-Za-z0-9_]*$/.test(keyEnvVar)) {
    throw new SettingRefusedError(`key variable: ${JSON.stringify(keyEnvVar)} is not a variable name`);
  }
  try {
    assertKeyVarAllowed(keyEnvVar, keyVarGlobs);
  } catch (err) {
    throw new SettingRefusedError(errorMessage(err));
  }
  return { adapter, endpointUrl: url.toString(), keyEnvVar };
}

export function routeInput(input: { role?: string; harness?: string }): RouteRow {
  return { role_id: name('role', input.role), harness_alias: name('harness', input.harness) };
}

export type ModelTestResult =
  { ok: true; latencyMs: number; model: string } | { ok: false; latencyMs: number; error: string };

/** One minimal call to the provider: a one-token completion, MODEL_TEST_TIMEOUT_MS at most, no retries. */
export async function testModelProvider(
  row: ModelProviderRow,
  options: { keyVarGlobs: readonly string[]; keyGrant?: KeyGrant; env?: NodeJS.ProcessEnv; timeoutMs?: number },
): Promise<ModelTestResult> {
  const started = performance.now();
  const latency = () => Math.round(performance.now() - started);
  try {
    const common = {
      model: row.model,
      apiKeyEnvVar: row.api_key_env_var,
      env: options.env,
      keyVarGlobs: options.keyVarGlobs,
      keyGrant: options.keyGrant,
    };
    const model =
      row.provider === 'openai-compatible'
        ? createOpenAICompatibleModel({ ...common, baseURL: row.base_url ?? '' })
        : createNativeModel({ ...common, provider: row.provider, baseURL: row.base_url });
    await generateText({
      model,
      prompt: 'Reply with: ok',
      maxOutputTokens: 1,
      maxRetries: 0,
      abortSignal: AbortSignal.timeout(options.timeoutMs ?? MODEL_TEST_TIMEOUT_MS),
    });
    return { ok: true, latencyMs: latency(), model: row.model };
  } catch (err) {
    const timedOut = (err as Error).name === 'TimeoutError' || (err as Error).name === 'AbortError';
    const text = timedOut
      ? `no answer within ${(options.timeoutMs ?? MODEL_TEST_TIMEOUT_MS) / 1000} s`
      : errorWithCauses(err);
    return { ok: false, latencyMs: latency(), error: redactString(text).slice(0, 500) };
  }
}

export type HarnessTestResult = ProbeResult & { adapter: string };

/**
 * The Test of a harness: a remote adapter's endpoint answers one probe run (no tool executed,
 * 10 s at most); a minimal harness is the worker's own loop, with nothing remote to reach.
 */
export async function testHarness(
  row: HarnessRow,
  options: { keyGrant?: KeyGrant; keyVarGlobs?: readonly string[]; env?: NodeJS.ProcessEnv; timeoutMs?: number },
): Promise<HarnessTestResult> {
  if (row.adapter === 'minimal' || !row.endpoint_url)
    return { ok: true, latencyMs: 0, events: 0, adapter: row.adapter };
  const result = await probeAgUiEndpoint({ url: row.endpoint_url, keyEnvVar: row.key_env_var }, options);
  return { ...result, adapter: row.adapter };
}
