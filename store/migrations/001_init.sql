-- echodo-worker schema. Every table carries workspace_id; row-level security keeps
-- one workspace from another. The application works as echodo_app, which is
-- neither superuser nor BYPASSRLS, and FORCE ROW LEVEL SECURITY applies the
-- policies to the tables' owner too.

do $$ begin
  if not exists (select 1 from pg_roles where rolname = 'echodo_app') then
    create role echodo_app nologin nosuperuser nobypassrls;
  end if;
end $$;

create table workspaces (
  workspace_id text primary key check (workspace_id ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$'),
  name         text,
  created_at   timestamptz not null default now()
);

create table convoys (
  workspace_id text not null references workspaces on delete cascade,
  id           text not null,
  created_at   timestamptz not null default now(),
  primary key (workspace_id, id)
);

-- The task a run works on, mirroring the orchestrator's claim_task / complete_task.
create table briefs (
  workspace_id     text not null references workspaces on delete cascade,
  id               text not null,
  convoy_id        text not null,
  role_id          text not null,
  status           text not null default 'open' check (status in ('open', 'claimed', 'done')),
  claimed_by_run   text,
  claimed_at       timestamptz,
  completed_at     timestamptz,
  created_at       timestamptz not null default now(),
  primary key (workspace_id, id),
  foreign key (workspace_id, convoy_id) references convoys (workspace_id, id)
);

create table agent_runs (
  id               text primary key,
  workspace_id     text not null references workspaces on delete cascade,
  convoy_id        text not null,
  brief_id         text not null,
  job_id           text not null,
  job              jsonb not null,            -- the validated job, brief redacted
  harness_alias    text,
  status           text not null default 'queued' check (status in ('queued', 'running', 'completed', 'failed')),
  attempt          integer not null default 1 check (attempt >= 1),
  lease_epoch      integer not null default 0,
  worker_id        text,
  heartbeat_at     timestamptz,
  lease_expires_at timestamptz,
  available_at     timestamptz not null default now(), -- Postgres queue: visibility timeout of a taken job
  queued_at        timestamptz not null default now(),
  step             integer not null default 0,          -- tool rounds done, across attempts
  branch           text,
  worktree_path    text,
  base_oid         text,                                -- commit the run's branch started from
  failure_reason   text,
  created_at       timestamptz not null default now(),
  started_at       timestamptz,
  finished_at      timestamptz,
  unique (workspace_id, job_id),
  foreign key (workspace_id, convoy_id) references convoys (workspace_id, id),
  foreign key (workspace_id, brief_id) references briefs (workspace_id, id)
);
create index agent_runs_status_lease on agent_runs (status, lease_expires_at);
create index agent_runs_queue on agent_runs (available_at, created_at) where status = 'queued';
create index agent_runs_convoy on agent_runs (workspace_id, convoy_id, created_at);

create table worker_checkpoints (
  id             bigint generated always as identity primary key,
  workspace_id   text not null references workspaces on delete cascade,
  agent_run_id   text not null references agent_runs on delete cascade,
  convoy_id      text not null,
  brief_id       text not null,
  checkpoint_seq integer not null check (checkpoint_seq >= 1),
  step           integer not null,
  attempt        integer not null,
  lease_epoch    integer not null,
  tool_history   jsonb not null,
  files_touched  jsonb not null,
  branch         text,
  worktree_path  text,
  commit_oid     text,
  prev_hash      text,
  hash           text not null,
  occurred_at    timestamptz not null default now(),
  unique (agent_run_id, checkpoint_seq)
);
-- Latest checkpoint of a run is the unique index (agent_run_id, checkpoint_seq) read backwards.
-- Checkpoints of a convoy, for mission control: count and last time per run without touching the heap.
create index worker_checkpoints_convoy on worker_checkpoints (workspace_id, convoy_id, agent_run_id, occurred_at);

create table convoy_events (
  id           bigint generated always as identity primary key,
  workspace_id text not null references workspaces on delete cascade,
  convoy_id    text not null,
  agent_run_id text,
  type         text not null,
  metadata     jsonb not null default '{}',
  occurred_at  timestamptz not null default now()
);
create index convoy_events_convoy on convoy_events (workspace_id, convoy_id, occurred_at);
create index convoy_events_run on convoy_events (agent_run_id, occurred_at);

create table model_providers (
  workspace_id    text not null references workspaces on delete cascade,
  alias           text not null,
  provider        text not null check (provider in ('openai-compatible')),
  base_url        text not null,
  model           text not null,
  api_key_env_var text,                      -- the name of the variable, never its value
  primary key (workspace_id, alias)
);

create table harness_providers (
  workspace_id     text not null references workspaces on delete cascade,
  alias            text not null,
  needs_worktree   boolean not null,
  allowed_commands text[] not null default '{}',
  write_prefixes   text[],                   -- null: anywhere in the root
  primary key (workspace_id, alias)
);

create table role_harness_routes (
  workspace_id  text not null references workspaces on delete cascade,
  role_id       text not null,
  harness_alias text not null,
  primary key (workspace_id, role_id)
);

-- Jobs that could not be taken: bad JSON, a schema failure, an unknown workspace.
-- workspace_id is what the job claimed ('' when unreadable); written through echodo_dead_letter().
create table dead_letters (
  id           bigint generated always as identity primary key,
  workspace_id text not null default '',
  job_id       text,
  reason       text not null,
  raw          text not null,
  occurred_at  timestamptz not null default now()
);

-- ---------------------------------------------------------------- security
do $$
declare t text;
begin
  foreach t in array array['workspaces', 'convoys', 'briefs', 'agent_runs', 'worker_checkpoints',
                           'convoy_events', 'model_providers', 'harness_providers', 'role_harness_routes',
                           'dead_letters'] loop
    execute format('alter table %I enable row level security', t);
    execute format('alter table %I force row level security', t);
    -- current_setting(..., true) is null when unset: a query with no workspace sees nothing.
    execute format($p$create policy workspace_isolation on %I
                      using (workspace_id = nullif(current_setting('app.workspace_id', true), ''))
                      with check (workspace_id = nullif(current_setting('app.workspace_id', true), ''))$p$, t);
    execute format('grant select, insert, update, delete on %I to echodo_app', t);
  end loop;
end $$;

-- ------------------------------------------------ live feed for mission control
create function echodo_notify_change() returns trigger language plpgsql as $$
begin
  perform pg_notify('echodo_changes', json_build_object(
    'table', tg_table_name,
    'workspaceId', new.workspace_id,
    'convoyId', new.convoy_id,
    'agentRunId', coalesce(to_jsonb(new) ->> 'agent_run_id', to_jsonb(new) ->> 'id')
  )::text);
  return null;
end $$;
create trigger worker_checkpoints_notify after insert on worker_checkpoints
  for each row execute function echodo_notify_change();
create trigger agent_runs_notify after insert or update of status, attempt on agent_runs
  for each row execute function echodo_notify_change();
