-- Run search (mission control's `q`) by trigrams: the searched columns joined into one expression
-- with a GIN trigram index on it, so a term that few runs hold is found without walking every run.
-- pg_trgm is a contrib extension a server may not have, or may not let this role create: then the
-- index is left out and the search still works, by a walk.
do $$
begin
  if exists (select 1 from pg_available_extensions where name = 'pg_trgm') then
    begin
      create extension if not exists pg_trgm;
      create index if not exists agent_runs_search on agent_runs using gin (
        (coalesce(job ->> 'brief', '') || ' ' || brief_id || ' ' || id || ' ' || coalesce(branch, '') || ' '
          || coalesce(worker_id, '') || ' ' || coalesce(host_id, '')) gin_trgm_ops);
    exception when others then
      raise warning 'run search without a trigram index: %', sqlerrm;
    end;
  end if;
end $$;

-- The current workspace's runs whose searched text contains p_pattern (an ILIKE pattern), at most
-- p_limit of them. Row-level security keeps a non-leakproof ILIKE off any index, so the lookup runs
-- as the owner, scoped to the workspace exactly as the policy scopes it. The joined text is only
-- the index's way in; the columns' own ILIKEs decide, so a match never spans two columns.
create function echodo_runs_matching(p_pattern text, p_limit integer)
returns setof text
language plpgsql stable security definer set search_path = public as $$
begin
  -- EXECUTE plans for this very pattern: a short one has no trigram to look up and is walked instead.
  return query execute $q$
    select r.id
      from agent_runs r
     where r.workspace_id = nullif(current_setting('app.workspace_id', true), '')
       and (coalesce(r.job ->> 'brief', '') || ' ' || r.brief_id || ' ' || r.id || ' ' || coalesce(r.branch, '')
             || ' ' || coalesce(r.worker_id, '') || ' ' || coalesce(r.host_id, '')) ilike $1
       and (r.job ->> 'brief' ilike $1 or r.brief_id ilike $1 or r.id ilike $1
            or r.branch ilike $1 or r.worker_id ilike $1 or r.host_id ilike $1)
     limit $2$q$ using p_pattern, p_limit;
end $$;
revoke all on function echodo_runs_matching(text, integer) from public;
grant execute on function echodo_runs_matching(text, integer) to echodo_app;
