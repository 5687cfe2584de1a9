-- Operators act: cancel (a new terminal status), fork (a run started from another run's
-- checkpoint). The cancel request is a column the worker reads at its heartbeat and before each
-- tool call; a run nobody is working on is cancelled at once by the request itself.
alter table agent_runs drop constraint if exists agent_runs_status_check;
alter table agent_runs add constraint agent_runs_status_check
  check (status in ('queued', 'running', 'completed', 'failed', 'cancelled'));

alter table agent_runs
  add column cancel_requested_at timestamptz,
  add column cancel_requested_by text,
  add column forked_from_run     text,
  add column forked_from_seq     integer,
  -- What the fork starts from, copied when it is made (the source may be pruned later):
  -- {step, hash, commitOid, history}. Null for a run that is not a fork.
  add column fork_seed           jsonb;

create index agent_runs_forked_from on agent_runs (workspace_id, forked_from_run) where forked_from_run is not null;

-- Cancelled runs are finished runs: retention prunes them like the others.
create or replace function echodo_prunable_runs(p_older_than interval)
returns table (workspace_id text, agent_run_id text)
language sql security definer set search_path = public as $$
  select r.workspace_id, r.id from agent_runs r
   where r.status in ('completed', 'failed', 'cancelled') and r.finished_at < now() - p_older_than
$$;
revoke all on function echodo_prunable_runs(interval) from public;
