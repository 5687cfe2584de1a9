// Redaction before anything is persisted or logged. Two sources of secrets: the values of
// environment variables (those named by model_providers.api_key_env_var, and any whose name
// contains KEY, TOKEN, SECRET or PASSWORD), and common key shapes. It fails closed.

const SECRET_NAME = /KEY|TOKEN|SECRET|PASSWORD/i;
const MIN_SECRET_LENGTH = 6; // shorter values would redact ordinary words

const KEY_SHAPES: [RegExp, string][] = [
  [/-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|$)/g, '[redacted:private-key]'],
  [/\bsk-[A-Za-z0-9_-]{16,}/g, '[redacted:sk]'],
  [/\bgithub_pat_[A-Za-z0-9_]{20,}/g, '[redacted:github-pat]'],
  [/\bgh[pousr]_[A-Za-z0-9]{20,}/g, '[redacted:github-token]'],
  [/\b(?:AKIA|ASIA)[0-9A-Z]{16}\b/g, '[redacted:aws-key]'],
  [/\bxox[abposr]-[A-Za-z0-9-]{10,}/g, '[redacted:slack-token]'],
  [/\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}/g, '[redacted:jwt]'],
];

// NUL and lone surrogates (a high one not followed by a low one, or a low one not preceded by a high one).
const UNSTORABLE = /\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

const known = new Map<string, string>(); // secret value -> variable name
let knownPattern: RegExp | null = null;

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

function rebuild(): void {
  const values = [...known.keys()].sort((a, b) => b.length - a.length);
  knownPattern = values.length ? new RegExp(values.map(escapeRegExp).join('|'), 'g') : null;
}

/** Adds the values of the named variables (and of every secret-looking variable) to the redactor. */
export function registerSecretsFromEnv(env: NodeJS.ProcessEnv = process.env, extraNames: Iterable<string> = []): void {
  const names = new Set(extraNames);
  for (const name of Object.keys(env)) if (SECRET_NAME.test(name)) names.add(name);
  let changed = false;
  for (const name of names) {
    const value = env[name];
    if (value && value.length >= MIN_SECRET_LENGTH && !known.has(value)) {
      known.set(value, name);
      changed = true;
    }
  }
  if (changed) rebuild();
}

/** Redacts one string. Throws only on a bug; callers that persist use redactOrDrop. */
export function redactString(text: string): string {
  let out = text;
  if (knownPattern) out = out.replace(knownPattern, (m) => `[redacted:${known.get(m) ?? 'secret'}]`);
  for (const [pattern, replacement] of KEY_SHAPES) out = out.replace(pattern, replacement);
  return out;
}

/**
 * Redacts and truncates every string in a JSON-able value, and makes each one storable: Postgres
 * jsonb refuses NUL and lone surrogates (which truncation could also create by cutting a pair).
 */
export function redactValue<T>(value: T, maxString = 2000): T {
  const walk = (v: unknown): unknown => {
    if (typeof v === 'string') {
      const r = redactString(v);
      const cut = r.length > maxString ? `${r.slice(0, maxString)}…[${r.length - maxString} more chars]` : r;
      return cut.replace(UNSTORABLE, '\uFFFD');
    }
    if (Array.isArray(v)) return v.map(walk);
    if (v && typeof v === 'object') {
      const out: Record<string, unknown> = {};
      for (const [k, x] of Object.entries(v)) out[k] = walk(x);
      return out;
    }
    return v;
  };
  return walk(value) as T;
}

/** Fail closed: if redaction cannot run, the field is dropped, never stored raw. */
export function redactOrDrop<T>(value: T, maxString?: number): T | { dropped: 'redaction failed' } {
  try {
    return redactValue(value, maxString);
  } catch {
    return { dropped: 'redaction failed' };
  }
}

registerSecretsFromEnv();
