-- Cross-workspace reads and writes that no single workspace may make: taking the next
-- queued run, sweeping for stalled runs, recording a dead letter. Each is a narrow
-- SECURITY DEFINER function; workspace data itself is then read through withWorkspace.

-- Postgres queue: reserve the oldest visible queued run for p_visibility_ms (like an SQS
-- visibility timeout). The worker then claims it with a compare-and-set in its workspace;
-- if the worker dies before claiming, the run becomes visible again.
create function echodo_take_queued_run(p_visibility_ms integer)
returns table (workspace_id text, agent_run_id text, job jsonb)
language sql security definer set search_path = public as $$
  update agent_runs r
     set available_at = now() + make_interval(secs => p_visibility_ms / 1000.0)
   where r.id = (select q.id from agent_runs q
                  where q.status = 'queued' and q.available_at <= now()
                  order by q.available_at, q.created_at
                  for update skip locked limit 1)
  returning r.workspace_id, r.id, r.job
$$;

-- Runs the stall detector must look at: running with an expired lease, or queued and
-- not taken for longer than p_queued_ms.
create function echodo_stalled_runs(p_queued_ms integer)
returns table (workspace_id text, agent_run_id text, status text, lease_epoch integer, attempt integer)
language sql security definer set search_path = public as $$
  select r.workspace_id, r.id, r.status, r.lease_epoch, r.attempt
    from agent_runs r
   where (r.status = 'running' and r.lease_expires_at < now())
      or (r.status = 'queued' and r.queued_at < now() - make_interval(secs => p_queued_ms / 1000.0))
   order by r.lease_expires_at nulls last
   limit 500
$$;

create function echodo_dead_letter(p_workspace_id text, p_job_id text, p_reason text, p_raw text)
returns bigint
language sql security definer set search_path = public as $$
  insert into dead_letters (workspace_id, job_id, reason, raw)
  values (coalesce(p_workspace_id, ''), p_job_id, p_reason, p_raw)
  returning id
$$;

revoke all on function echodo_take_queued_run(integer), echodo_stalled_runs(integer),
  echodo_dead_letter(text, text, text, text) from public;
