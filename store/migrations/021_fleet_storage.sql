-- The admin's fleet view of storage: per workspace, its checkpoint rows and what the storage
-- sweep last measured against its quota. The list crosses workspaces, so it is a security-definer
-- function; it names workspaces and counts, nothing of a run.
create function echodo_fleet_storage()
returns table (
  workspace_id    text,
  checkpoint_rows bigint,
  used_bytes      bigint,
  quota_bytes     bigint,
  measured_at     timestamptz
)
language sql stable security definer set search_path = public as $$
  select w.workspace_id,
         (select count(*) from worker_checkpoints c where c.workspace_id = w.workspace_id),
         p.used_bytes, p.quota_bytes, p.measured_at
    from workspaces w
    left join workspace_storage_policies p on p.workspace_id = w.workspace_id
   order by w.workspace_id
$$;
revoke all on function echodo_fleet_storage() from public;
grant execute on function echodo_fleet_storage() to echodo_app;

-- The runs list filters on the job's model: with statistics on that expression the planner knows
-- how many runs match and walks agent_runs_newest for a page instead of sorting the workspace.
create statistics agent_runs_model on (job->>'model') from agent_runs;
