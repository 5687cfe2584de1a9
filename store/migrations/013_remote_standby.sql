-- The remote standby (worker/remote-standby.ts): every host keeps the latest checkpoint of each run
-- that another host holds already fetched from WORKER_CHECKPOINT_REMOTE, so that taking such a run
-- over needs no fetch. A host asks which runs those are across workspaces: runs running or queued,
-- recorded on another host, on a branch of the host's own repository (no job repoPath), with their
-- latest checkpoint's commit. Narrow: ids, branch and commit only.
create function echodo_standby_runs(p_host_id text)
returns table (workspace_id text, agent_run_id text, branch text, commit_oid text)
language sql stable security definer set search_path = public as $$
  select r.workspace_id, r.id, r.branch, c.commit_oid
    from agent_runs r
   cross join lateral (select k.commit_oid from worker_checkpoints k
                        where k.workspace_id = r.workspace_id and k.agent_run_id = r.id
                        order by k.checkpoint_seq desc limit 1) c
   where r.status in ('running', 'queued') and r.host_id is not null and r.host_id <> p_host_id
     and r.branch is not null and c.commit_oid is not null and not (r.job ? 'repoPath')
   order by r.workspace_id, r.id
   limit 1000
$$;
revoke all on function echodo_standby_runs(text) from public;
grant execute on function echodo_standby_runs(text) to echodo_app;
