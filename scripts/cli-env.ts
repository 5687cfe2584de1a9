// One line per environment variable, for the commands' --help. The defaults and validation live in
// core/config.ts; these only say what each variable is for.
export const ENV_HELP: Record<string, string> = {
  DATABASE_URL: 'Postgres, the source of truth (unset: an embedded PostgreSQL under ECHODO_HOME)',
  DATABASE_APP_URL: 'the non-superuser login the processes use (unset: derived from DATABASE_URL)',
  ECHODO_HOME:
    'embedded database, demo files, pidfiles (default: ~/.echodo, for root with a closed home /var/lib/echodo; ' +
    'never inside a tree agents work in)',
  WORKER_REPLAY_DIR: 'the only folder replay:<path> transcripts are read from (unset: no replay model)',
  REDIS_URL: 'the Redis job queue (unset: the queue is Postgres itself)',
  WORKER_QUEUE_KEY: 'the Redis list jobs arrive on (default echodo:orchestrator:jobs)',
  WORKER_DRY_RUN: 'print the banner (configuration, secrets masked) and exit 0',
  WORKER_BLPOP_TIMEOUT_S: 'blocking pop timeout in seconds (default 5)',
  WORKER_MAX_TOOL_STEPS: 'tool rounds per run, across resumes (default 12)',
  WORKER_CHECKPOINT_EVERY_N_STEPS: 'a checkpoint every N tool rounds (default 1)',
  WORKER_CONTEXT_ROUNDS: 'rounds sent to the model verbatim; older ones are summarised (default 8)',
  WORKER_METRICS_PORT: "the worker's Prometheus /metrics on 127.0.0.1 at this port (unset: off)",
  OTEL_EXPORTER_OTLP_ENDPOINT: 'where OpenTelemetry traces are sent over OTLP/HTTP (unset: off)',
  WORKER_CHECKPOINT_RETENTION_DAYS: 'when set, finished runs older than this are pruned on a schedule',
  WORKER_REPO_ROOT: 'the default repository of jobs and of doc-writer writes (default: the project root)',
  WORKER_WORKTREE_BASE: 'parent of all worktrees (default $TMPDIR/echodo-worker-worktrees)',
  WORKER_NOTES_REF: 'git notes ref of the checkpoint mirror (default refs/notes/echodo-checkpoints)',
  WORKER_HEARTBEAT_MS: 'heartbeat period (default 2000)',
  WORKER_LEASE_MS: 'a run whose lease is older than this is stalled (default 10000)',
  WORKER_ID: "this worker's id (default hostname-pid)",
  WORKER_ALLOWED_COMMANDS: 'comma-separated run_command allowlist of the code harness',
  WORKER_SANDBOX: 'how run_command is confined: bwrap (default) or off',
  WORKER_PROVIDER_KEY_VARS: 'globs of the env variables a model provider may name (default *_API_KEY)',
  WORKER_HOST_ID: 'this host, recorded with each worktree (default: the hostname)',
  WORKER_CHECKPOINT_REMOTE: 'a git remote every checkpoint is pushed to (unset: single host)',
  WORKER_SPARE_WORKTREE: 'keep one warm spare worktree per repository (default true)',
  STALL_CHECK_MS: 'stall detector period (default 2000)',
  STALL_MAX_ATTEMPTS: 'attempts before a stalled run is failed (default 5)',
  WORKER_RETENTION_SWEEP_MS: 'how often the stall detector applies storage policies and quotas (default 60000)',
  MISSION_CONTROL_PORT: "the panel's port on 127.0.0.1 (default 4700)",
  ECHODO_SUPERVISE: 'the daemon restarts itself after a crash (default true; 0 when systemd or the like does)',
  LOG_LEVEL: 'fatal, error, warn, info (default), debug, trace or silent',
};

/** What every command that opens the database reads. */
export const DATABASE_ENV = ['DATABASE_URL', 'DATABASE_APP_URL', 'ECHODO_HOME'] as const;
