-- Pruning deletes old checkpoint rows of finished runs but keeps each run's last one. So the
-- hash chain stays verifiable, the hash of the last deleted row is kept here as an anchor:
-- the first remaining row must link to it.
create table checkpoint_anchors (
  workspace_id  text not null references workspaces on delete cascade,
  agent_run_id  text primary key references agent_runs on delete cascade,
  anchor_seq    integer not null,
  anchor_hash   text not null,
  pruned_at     timestamptz not null default now()
);
alter table checkpoint_anchors enable row level security;
alter table checkpoint_anchors force row level security;
create policy workspace_isolation on checkpoint_anchors
  using (workspace_id = nullif(current_setting('app.workspace_id', true), ''))
  with check (workspace_id = nullif(current_setting('app.workspace_id', true), ''));
grant select, insert, update, delete on checkpoint_anchors to echodo_app;

-- Finished runs with checkpoints older than the cutoff, across workspaces (the pruner then
-- works inside each workspace).
create function echodo_prunable_runs(p_older_than interval)
returns table (workspace_id text, agent_run_id text)
language sql security definer set search_path = public as $$
  select r.workspace_id, r.id from agent_runs r
   where r.status in ('completed', 'failed') and r.finished_at < now() - p_older_than
$$;
revoke all on function echodo_prunable_runs(interval) from public;
