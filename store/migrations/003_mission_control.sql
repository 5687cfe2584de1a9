-- Mission control: bearer tokens for the operator panel, the token lookup and fleet
-- rollup that must work before (or across) a workspace, and indexes for its reads.

-- A token is stored only as the sha256 of its text. workspace_id is '' for an admin
-- token, which reads the fleet rollup and no workspace's rows.
create table mission_control_tokens (
  id           bigint generated always as identity primary key,
  workspace_id text not null default '',
  is_admin     boolean not null default false,
  token_sha256 text not null unique check (token_sha256 ~ '^[0-9a-f]{64}$'),
  created_at   timestamptz not null default now(),
  last_used_at timestamptz,
  check ((is_admin and workspace_id = '') or (not is_admin and workspace_id <> ''))
);
alter table mission_control_tokens enable row level security;
alter table mission_control_tokens force row level security;
create policy workspace_isolation on mission_control_tokens
  using (workspace_id = nullif(current_setting('app.workspace_id', true), ''))
  with check (workspace_id = nullif(current_setting('app.workspace_id', true), ''));
grant select, insert, update, delete on mission_control_tokens to echodo_app;

-- A request carries a token before any workspace is known: look it up by its hash.
-- A workspace token stops working when its workspace is deleted. last_used_at is
-- touched at most once a minute so reads do not turn into a write per request.
create function echodo_token_lookup(p_sha256 text)
returns table (workspace_id text, is_admin boolean)
language sql security definer set search_path = public as $$
  with found as (
    select t.id, t.workspace_id, t.is_admin, t.last_used_at
      from mission_control_tokens t
     where t.token_sha256 = p_sha256
       and (t.is_admin or exists (select 1 from workspaces w where w.workspace_id = t.workspace_id))
  ), touched as (
    update mission_control_tokens t set last_used_at = now()
      from found f
     where t.id = f.id and (f.last_used_at is null or f.last_used_at < now() - interval '1 minute')
  )
  select f.workspace_id, f.is_admin from found f
$$;

-- Admin tokens belong to no workspace, so no workspace transaction may insert one.
create function echodo_admin_token_create(p_sha256 text)
returns bigint
language sql security definer set search_path = public as $$
  insert into mission_control_tokens (workspace_id, is_admin, token_sha256)
  values ('', true, p_sha256)
  returning id
$$;

-- The fleet rollup for admins: one row per workspace.
create function echodo_fleet_summary()
returns table (
  workspace_id text,
  queued bigint,
  running bigint,
  stalled bigint,
  completed_last_day bigint,
  failed_last_day bigint,
  checkpoints_last_minute bigint,
  workers jsonb
)
language sql stable security definer set search_path = public as $$
  with runs as (
    select r.workspace_id,
           count(*) filter (where r.status = 'queued') as queued,
           count(*) filter (where r.status = 'running') as running,
           count(*) filter (where r.status = 'running' and r.lease_expires_at < now()) as stalled,
           count(*) filter (where r.status = 'completed' and r.finished_at > now() - interval '1 day') as completed_last_day,
           count(*) filter (where r.status = 'failed' and r.finished_at > now() - interval '1 day') as failed_last_day
      from agent_runs r
     where r.status in ('queued', 'running') or r.finished_at > now() - interval '1 day'
     group by r.workspace_id
  ), recent as (
    select c.workspace_id, count(*) as checkpoints_last_minute
      from worker_checkpoints c
     where c.occurred_at > now() - interval '1 minute'
     group by c.workspace_id
  ), workers as (
    select h.workspace_id,
           jsonb_agg(jsonb_build_object('workerId', h.worker_id, 'lastHeartbeatAt', h.last_heartbeat_at)
                     order by h.last_heartbeat_at desc) as workers
      from (select r.workspace_id, r.worker_id, max(r.heartbeat_at) as last_heartbeat_at
              from agent_runs r
             where r.worker_id is not null and r.heartbeat_at > now() - interval '1 day'
             group by r.workspace_id, r.worker_id) h
     group by h.workspace_id
  )
  select w.workspace_id,
         coalesce(runs.queued, 0), coalesce(runs.running, 0), coalesce(runs.stalled, 0),
         coalesce(runs.completed_last_day, 0), coalesce(runs.failed_last_day, 0),
         coalesce(recent.checkpoints_last_minute, 0),
         coalesce(workers.workers, '[]'::jsonb)
    from workspaces w
    left join runs using (workspace_id)
    left join recent using (workspace_id)
    left join workers using (workspace_id)
   order by w.workspace_id
$$;

revoke all on function echodo_token_lookup(text), echodo_admin_token_create(text), echodo_fleet_summary() from public;

-- Checkpoints of the last minute, for the fleet rate, without touching the heap.
create index worker_checkpoints_recent on worker_checkpoints (occurred_at) include (workspace_id);
-- Runs finished in the last day and heartbeats seen, for the fleet rollup.
create index agent_runs_finished on agent_runs (finished_at) where finished_at is not null;
