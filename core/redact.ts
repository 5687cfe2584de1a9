// The one redaction function: every string that is persisted (rows, event metadata, failure
// reasons, dead letters, notes, commit messages) or logged passes redactString, and any cut to
// a length happens after it (storableText / redactValue), so a key straddling a cut is never
// stored minus its first characters. Two sources of secrets:
//  - registered values: env variables named by any workspace's model_providers.api_key_env_var,
//    those whose name looks secret (KEY, TOKEN, SECRET, PASSWORD) or matches
//    WORKER_PROVIDER_KEY_VARS, and the credentials inside DATABASE_URL, DATABASE_APP_URL,
//    REDIS_URL (registered at import from the environment, and at start-up: registerStartupSecrets);
//  - key shapes: sk-…, ghp_…, xox…-, AWS keys, JWTs, private keys, `Bearer <anything>`,
//    Authorization headers, URLs with a password, NAME=value of secret-looking names.
// It fails closed: callers that persist use redactOrDrop / storableText, which drop on failure.

const SECRET_NAME = /KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL/i;
const MIN_SECRET_LENGTH = 6; // shorter values would redact ordinary words
const URL_VARS = ['DATABASE_URL', 'DATABASE_APP_URL', 'REDIS_URL', 'WORKER_CHECKPOINT_REMOTE'];

const KEY_SHAPES: [RegExp, string][] = [
  [/-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|$)/g, '[redacted:private-key]'],
  // Credentials in a header, whatever their scheme or shape (real providers echo them in errors).
  [
    /\b(authorization["']?\s*[:=]\s*["']?)(?!\[redacted)(?:(?:Bearer|Basic|Token|Digest)\s+)?[^\s"',;]+/gi,
    '$1[redacted:authorization]',
  ],
  [/\bBearer\s+(?!\[redacted)[^\s"'`,;<>)\]}]+/gi, 'Bearer [redacted:bearer]'],
  // scheme://user:password@host keeps the user, not the password.
  [/\b([a-z][a-z0-9+.-]*:\/\/[^\s:@/"'<>]*):(?!\[redacted)[^\s@/"'<>]+@/gi, '$1:[redacted:password]@'],
  [
    /([?&](?:password|passwd|pass|pwd|token|secret|api_key|apikey|access_token)=)(?!\[redacted)[^&\s"'#]+/gi,
    '$1[redacted]',
  ],
  [/\bsk-[A-Za-z0-9_-]{16,}/g, '[redacted:sk]'],
  [/\bgithub_pat_[A-Za-z0-9_]{20,}/g, '[redacted:github-pat]'],
  [/\bgh[pousr]_[A-Za-z0-9]{20,}/g, '[redacted:github-token]'],
  [/\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b/g, '[redacted:aws-key]'],
  [/\b(aws_secret_access_key["']?\s*[:=]\s*["']?)[A-Za-z0-9/+=]{40}\b/gi, '$1[redacted:aws-secret]'],
  [/\bxox[a-z]-[A-Za-z0-9-]{10,}/g, '[redacted:slack-token]'],
  [/\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}/g, '[redacted:jwt]'],
  // An env dump or config line naming a secret-looking variable: FOO_TOKEN=value.
  // Bounded name parts: an unbounded `[A-Z0-9_]*` twice is quadratic on a long uppercase run.
  [
    /\b([A-Z0-9_]{0,64}(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)[A-Z0-9_]{0,64}=)(?!\[redacted)[^\s"']{6,}/g,
    '$1[redacted]',
  ],
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

function add(value: string | undefined, name: string): boolean {
  if (!value || value.length < MIN_SECRET_LENGTH || known.has(value)) return false;
  known.set(value, name);
  return true;
}

/** Registers one secret value under a name (shown in the marker that replaces it). */
export function registerSecret(value: string | undefined, name: string): void {
  if (add(value, name)) rebuild();
}

/** How many values are registered (start-up log and tests; never the values). */
export function registeredSecretCount(): number {
  return known.size;
}

/** Shell-style glob of a variable name (`*` any run, `?` one character). */
export function globToRegExp(glob: string): RegExp {
  return new RegExp(
    `^${glob
      .split('')
      .map((c) => (c === '*' ? '.*' : c === '?' ? '.' : escapeRegExp(c)))
      .join('')}$`,
  );
}

/**
 * Adds the values of the named variables, of every secret-looking variable and of every variable
 * matching one of `globs` (WORKER_PROVIDER_KEY_VARS) to the redactor.
 */
export function registerSecretsFromEnv(
  env: NodeJS.ProcessEnv = process.env,
  extraNames: Iterable<string> = [],
  globs: readonly string[] = [],
): void {
  const names = new Set(extraNames);
  const patterns = globs.map(globToRegExp);
  for (const name of Object.keys(env)) {
    if (SECRET_NAME.test(name) || patterns.some((p) => p.test(name))) names.add(name);
  }
  let changed = false;
  for (const name of names) changed = add(env[name], name) || changed;
  for (const name of URL_VARS) changed = addUrlCredentials(env[name], name) || changed;
  if (changed) rebuild();
}

/**
 * The password of a URL, raw and percent-decoded, so `scheme://user:…@` keeps its user; a password
 * too short to register alone is registered as the whole userinfo (`user:password`) instead.
 */
function addUrlCredentials(url: string | undefined, name: string): boolean {
  if (!url) return false;
  const m = /^[a-z][a-z0-9+.-]*:\/\/([^@/?#]*)@/i.exec(url);
  if (!m) return false;
  const userinfo = m[1]!;
  const colon = userinfo.indexOf(':');
  if (colon < 0) {
    // A user alone is not a secret, except over http(s): hosted git takes a token as the user
    // (https://<token>@host/repo.git).
    if (!/^https?:/i.test(url) || userinfo.length < MIN_SECRET_LENGTH) return false;
    return [userinfo, safeDecode(userinfo)].map((v) => add(v, `${name} token`)).some(Boolean);
  }
  const password = userinfo.slice(colon + 1);
  const values =
    password.length >= MIN_SECRET_LENGTH ? [password, safeDecode(password)] : [userinfo, safeDecode(userinfo)];
  let changed = false;
  for (const v of values) changed = add(v, `${name} password`) || changed;
  return changed;
}

function safeDecode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

/** Registers the credentials inside connection URLs (the resolved embedded database URL too). */
export function registerUrlCredentials(urls: Record<string, string | undefined>): void {
  let changed = false;
  for (const [name, url] of Object.entries(urls)) changed = addUrlCredentials(url, name) || changed;
  if (changed) rebuild();
}

/** Redacts one string. Throws only on a bug; callers that persist use storableText or redactOrDrop. */
export function redactString(text: string): string {
  let out = text;
  if (knownPattern) out = out.replace(knownPattern, (m) => `[redacted:${known.get(m) ?? 'secret'}]`);
  for (const [pattern, replacement] of KEY_SHAPES) out = out.replace(pattern, replacement);
  return out;
}

/** Redacted first, then cut to `max` characters (the end kept when `keep` is 'tail'), then made storable. */
export function storableText(text: string, max = Infinity, keep: 'head' | 'tail' = 'head'): string {
  let out: string;
  try {
    out = redactString(text);
  } catch {
    return '[dropped: redaction failed]';
  }
  if (out.length > max) {
    out =
      keep === 'head'
        ? `${out.slice(0, max)}…[${out.length - max} more chars]`
        : `[${out.length - max} chars before]…${out.slice(-max)}`;
  }
  return out.replace(UNSTORABLE, '\uFFFD');
}

/**
 * Redacts (then truncates) every string in a JSON-able value, and makes each one storable:
 * Postgres jsonb refuses NUL and lone surrogates (which truncation could also create by
 * cutting a pair). Object keys are redacted too.
 */
export function redactValue<T>(value: T, maxString = 2000): T {
  const walk = (v: unknown): unknown => {
    if (typeof v === 'string') {
      const r = redactString(v);
      const cut = r.length > maxString ? `${r.slice(0, maxString)}…[${r.length - maxString} more chars]` : r;
      return cut.replace(UNSTORABLE, '\uFFFD');
    }
    if (Array.isArray(v)) return v.map(walk);
    if (v && typeof v === 'object' && !(v instanceof Date)) {
      const out: Record<string, unknown> = {};
      for (const [k, x] of Object.entries(v)) out[redactString(k).replace(UNSTORABLE, '\uFFFD')] = walk(x);
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

// Whatever imports the redactor is covered from its first line: the process's own secrets.
registerSecretsFromEnv(
  process.env,
  [],
  (process.env.WORKER_PROVIDER_KEY_VARS ?? '*_API_KEY')
    .split(',')
    .map((g) => g.trim())
    .filter(Boolean),
);
