-- queued_at is when a run last became queued (dispatched, handed back, re-dispatched), so the age of
-- the oldest queued job means what it says; a stall sweep's re-enqueue of a run that never left the
-- queue no longer restarts it. The sweep's throttle moves to available_at, which the re-enqueue
-- resets (and a Postgres-queue take pushes past its visibility timeout).
create or replace function echodo_stalled_runs(p_queued_ms integer)
returns table (workspace_id text, agent_run_id text, status text, lease_epoch integer, attempt integer)
language sql security definer set search_path = public as $$
  select r.workspace_id, r.id, r.status, r.lease_epoch, r.attempt
    from agent_runs r
   where (r.status = 'running' and r.lease_expires_at < now())
      or (r.status = 'queued' and r.available_at < now() - make_interval(secs => p_queued_ms / 1000.0))
   order by r.lease_expires_at nulls last
   limit 500
$$;
