// Every environment variable of the contract, parsed once with zod at start-up.
// A bad value stops the process with a message naming the variable.
import os from 'node:os';
import { realpathSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { redactString } from './redact.ts';

export const PROJECT_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** Where root's daemons keep their state when root's own home is closed to other users. */
export const ROOT_FALLBACK_HOME = '/var/lib/echodo';

/** True when every folder from `dir` up lets other users through (the embedded server's user among them). */
function othersMayEnter(dir: string): boolean {
  for (let current = path.resolve(dir); ; current = path.dirname(current)) {
    try {
      if ((statSync(current).mode & 0o001) === 0) return false;
    } catch {
      return false;
    }
    if (path.dirname(current) === current) return true;
  }
}

/**
 * ~/.echodo, except for root whose home other users cannot enter: run as root, the embedded
 * PostgreSQL runs as `postgres` and could not reach a database there, so nothing would start.
 */
export function defaultHome(uid = process.getuid?.()): string {
  const home = os.homedir();
  return uid === 0 && !othersMayEnter(home) ? ROOT_FALLBACK_HOME : path.join(home, '.echodo');
}

const bool = z
  .enum(['1', '0', 'true', 'false', 'yes', 'no', ''])
  .transform((v) => v === '1' || v === 'true' || v === 'yes');
const int = (min: number) => z.coerce.number().int().min(min);

/**
 * How long one push, fetch or ref listing of the checkpoint remote may take before git is stopped
 * and the remote counts as down: a remote that accepts connections and never answers would
 * otherwise hold a run, its lease heartbeating, for good. The CLIs use it as it is.
 */
export const DEFAULT_REMOTE_TIMEOUT_MS = 60_000;

const schema = z.object({
  DATABASE_URL: z.string().url().optional(),
  // Outside every tree an agent works in (the repo root is one): the home holds the database password.
  ECHODO_HOME: z
    .string()
    .min(1)
    .default(() => defaultHome()),
  REDIS_URL: z.string().url().optional(),
  WORKER_QUEUE_KEY: z.string().min(1).default('echodo:orchestrator:jobs'),
  WORKER_DRY_RUN: bool.default(false),
  WORKER_BLPOP_TIMEOUT_S: int(1).default(5),
  WORKER_MAX_TOOL_STEPS: int(1).default(12),
  WORKER_CHECKPOINT_EVERY_N_STEPS: int(1).default(1),
  WORKER_CHECKPOINT_HISTORY_LIMIT: int(1).default(50),
  // Rounds the live conversation keeps verbatim; the ones before are summarised (worker/run/context-window.ts).
  WORKER_CONTEXT_ROUNDS: int(1).default(8),
  WORKER_CHECKPOINT_RETENTION_DAYS: int(1).optional(),
  WORKER_REPO_ROOT: z.string().min(1).default(PROJECT_ROOT),
  WORKER_WORKTREE_BASE: z.string().min(1).default(path.join(os.tmpdir(), 'echodo-worker-worktrees')),
  WORKER_NOTES_REF: z
    .string()
    .regex(/^refs\/notes\/[A-Za-z0-9._\/-]+$/, 'must be a ref under refs/notes/')
    .default('refs/notes/echodo-checkpoints'),
  WORKER_HEARTBEAT_MS: int(10).default(2000),
  WORKER_LEASE_MS: int(50).default(10000),
  WORKER_ID: z.string().min(1).default(`${os.hostname()}-${process.pid}`),
  WORKER_ALLOWED_COMMANDS: z.string().optional(),
  WORKER_COMMAND_TIMEOUT_MS: int(100).default(120000),
  STALL_CHECK_MS: int(10).default(2000),
  STALL_MAX_ATTEMPTS: int(1).default(5),
  STALL_QUEUED_MS: int(100).default(60000),
  WORKER_RETENTION_SWEEP_MS: int(10).default(60000),
  MISSION_CONTROL_PORT: int(0).max(65535).default(4700),
  // The worker's Prometheus /metrics on 127.0.0.1 (worker/metrics.ts); unset: off.
  WORKER_METRICS_PORT: int(1).max(65535).optional(),
  // A bearer token that lets a non-loopback scrape of mission control's /metrics in; unset: loopback only.
  MISSION_CONTROL_METRICS_TOKEN: z.string().min(16, 'must be at least 16 characters').optional(),
  // The worker's OpenTelemetry traces go to this OTLP/HTTP endpoint (worker/tracing.ts); unset: no exporter.
  OTEL_EXPORTER_OTLP_ENDPOINT: z.string().url().optional(),
  // Isolation (docs/security.md): how run_command is confined, and which variables a provider may name.
  WORKER_SANDBOX: z.enum(['bwrap', 'off']).default('bwrap'),
  // The sandbox's binary and limits (worker/sandbox/index.ts has the defaults).
  WORKER_SANDBOX_BWRAP: z.string().min(1).optional(),
  WORKER_SANDBOX_CPU_S: int(1).optional(),
  WORKER_SANDBOX_FILE_MB: int(1).optional(),
  WORKER_SANDBOX_PIDS: int(8).optional(),
  WORKER_SANDBOX_MEMORY_MB: int(64).optional(),
  WORKER_PROVIDER_KEY_VARS: z
    .string()
    .regex(
      /^[A-Za-z0-9_*?]+(\s*,\s*[A-Za-z0-9_*?]+)*$/,
      'must be comma-separated globs of variable names, e.g. *_API_KEY',
    )
    .default('*_API_KEY'),
  DATABASE_APP_URL: z.string().url().optional(),
  // The only folder `replay:<path>` transcripts are read from; unset: no replay model at all.
  WORKER_REPLAY_DIR: z
    .string()
    .min(1)
    .refine((p) => path.isAbsolute(p), 'must be an absolute path')
    .optional(),
  // Many hosts (docs/checkpoints.md): where this worker runs, and the remote every checkpoint is pushed to.
  WORKER_HOST_ID: z
    .string()
    .min(1)
    .max(200)
    .regex(/^[A-Za-z0-9][A-Za-z0-9._:-]*$/, 'may hold only letters, digits, ".", "_", ":" and "-"')
    .default(os.hostname()),
  WORKER_CHECKPOINT_REMOTE: z.string().min(1).optional(),
  // One push, fetch or ref listing of it longer than this: the remote counts as down.
  WORKER_REMOTE_TIMEOUT_MS: int(100).default(DEFAULT_REMOTE_TIMEOUT_MS),
  // How often the remote standby fetches the latest checkpoints of runs other hosts hold (0: never).
  WORKER_REMOTE_STANDBY_MS: int(0)
    .refine((ms) => ms === 0 || ms >= 100, 'must be 0 (off) or at least 100')
    .default(2000),
  // One warm, checked-out spare worktree per repository per host (worker/worktrees/spares.ts).
  WORKER_SPARE_WORKTREE: bool.default(true),
  // The daemons restart themselves after a crash (core/supervisor.ts); 0 where systemd or Kubernetes do it.
  ECHODO_SUPERVISE: bool.default(true),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
});

export type Config = z.infer<typeof schema>;

/** Every environment variable the configuration reads (docs/reference.md names each). */
export const CONFIG_VARIABLES: readonly string[] = Object.keys(schema.shape);

export class ConfigError extends Error {
  constructor(readonly issues: string[]) {
    super(`invalid configuration:\n${issues.map((i) => `  ${i}`).join('\n')}`);
    this.name = 'ConfigError';
  }
}

/** Parse the environment. Empty strings count as unset, as in most shells' habits. */
export function parseConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const raw: Record<string, string> = {};
  for (const key of Object.keys(schema.shape)) {
    const value = env[key];
    if (value !== undefined && value !== '') raw[key] = value;
  }
  const result = schema.safeParse(raw);
  if (!result.success) {
    throw new ConfigError(
      result.error.issues.map(
        (i) => `${String(i.path[0])}: ${i.message} (got ${redactString(JSON.stringify(raw[String(i.path[0])]))})`,
      ),
    ); // a bad URL may hold a password
  }
  const config = result.data;
  if (config.WORKER_HEARTBEAT_MS >= config.WORKER_LEASE_MS) {
    throw new ConfigError([
      `WORKER_HEARTBEAT_MS: must be shorter than WORKER_LEASE_MS (${config.WORKER_HEARTBEAT_MS} >= ${config.WORKER_LEASE_MS})`,
    ]);
  }
  const misplaced = homePlacementProblem(config);
  if (misplaced) throw new ConfigError([misplaced]);
  return config;
}

function realOrResolved(p: string): string {
  try {
    return realpathSync(p);
  } catch {
    return path.resolve(p);
  }
}

/**
 * ECHODO_HOME (the database password, the app role file) must lie in no folder whose files an
 * agent reads or writes: the doc-writer works in WORKER_REPO_ROOT, runs in WORKER_WORKTREE_BASE.
 */
export function homePlacementProblem(
  config: Pick<Config, 'ECHODO_HOME' | 'WORKER_REPO_ROOT' | 'WORKER_WORKTREE_BASE'>,
  repos: string[] = [],
): string | undefined {
  const home = realOrResolved(config.ECHODO_HOME);
  const inside = (dir: string) => {
    const d = realOrResolved(dir);
    return home === d || home.startsWith(`${d}${path.sep}`);
  };
  const named: [string, string][] = [
    ['WORKER_REPO_ROOT', config.WORKER_REPO_ROOT],
    ['WORKER_WORKTREE_BASE', config.WORKER_WORKTREE_BASE],
    ...repos.map((r): [string, string] => [`the registered repository ${r}`, r]),
  ];
  const hit = named.find(([, dir]) => inside(dir));
  if (!hit) return undefined;
  return `ECHODO_HOME: ${config.ECHODO_HOME} lies inside ${hit[0]} (${hit[1]}), where agents read and write files; move ECHODO_HOME out of it`;
}

/** For CLI entry points: parse or exit 2 with the message. */
export function loadConfigOrExit(env: NodeJS.ProcessEnv = process.env): Config {
  try {
    return parseConfig(env);
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }
}

/** The config with anything secret masked, for banners. */
export function maskedConfig(config: Config): Record<string, unknown> {
  const masked: Record<string, unknown> = { ...config };
  for (const key of [
    'DATABASE_URL',
    'DATABASE_APP_URL',
    'REDIS_URL',
    'WORKER_CHECKPOINT_REMOTE',
    'OTEL_EXPORTER_OTLP_ENDPOINT',
  ] as const) {
    const value = config[key];
    if (!value) continue;
    masked[key] = value
      .replace(/\/\/([^:@/]*):([^@/]*)@/, '//$1:***@')
      .replace(/^(https?:\/\/)[^:@/]+@/i, '$1***@') // a token given as the user
      .replace(/([?&](?:password|pass|pwd)=)[^&]*/gi, '$1***');
  }
  return masked;
}
