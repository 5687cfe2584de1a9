-- The remote standby also aims the host's spare worktree at the latest checkpoint of a run that
-- looks abandoned on another host (worker/remote-standby.ts): queued, or running with a lease
-- that has gone unrenewed. So each run's status and the time its lease has left are listed too.
drop function echodo_standby_runs(text);
create function echodo_standby_runs(p_host_id text)
returns table (workspace_id text, agent_run_id text, branch text, commit_oid text, status text, lease_left_ms double precision)
language sql stable security definer set search_path = public as $$
  select r.workspace_id, r.id, r.branch, c.commit_oid, r.status,
         (extract(epoch from (r.lease_expires_at - now())) * 1000)::double precision
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
