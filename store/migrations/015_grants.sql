-- Operator grants (docs/security.md, "Grants"): which environment variable a workspace's provider
-- rows may name as their key, and to which hosts that key may be sent; which repositories (besides
-- WORKER_REPO_ROOT) a workspace's jobs may name as repoPath.
--
-- Operator-only writes: the app role (every worker, mission control, any workspace token) may
-- read its own workspace's grants and nothing more. No INSERT, UPDATE or DELETE is granted to
-- echodo_app, and no function that writes them is executable by it: grants are written over the
-- owner's connection (DATABASE_URL) by `npm run workspace -- key|repo …`, so a compromised app
-- login or a mission control token cannot widen them.
create table key_grants (
  workspace_id text not null references workspaces on delete cascade,
  env_var      text not null check (env_var ~ '^[A-Za-z_][A-Za-z0-9_]*$'),
  hosts        text[] not null default '{}', -- empty: the key may go to any host
  granted_at   timestamptz not null default now(),
  primary key (workspace_id, env_var)
);

-- path is the repository's realpath at registration; the lookup compares realpaths.
create table repo_grants (
  workspace_id  text not null references workspaces on delete cascade,
  path          text not null check (path like '/%'),
  shared        boolean not null default false,
  registered_at timestamptz not null default now(),
  primary key (workspace_id, path)
);
create index repo_grants_path on repo_grants (path);

do $$
declare t text;
begin
  foreach t in array array['key_grants', 'repo_grants'] loop
    execute format('alter table %I enable row level security', t);
    execute format('alter table %I force row level security', t);
    execute format($p$create policy workspace_isolation on %I
                      using (workspace_id = nullif(current_setting('app.workspace_id', true), ''))
                      with check (workspace_id = nullif(current_setting('app.workspace_id', true), ''))$p$, t);
    execute format('grant select on %I to echodo_app', t);
  end loop;
end $$;

-- Whether the current workspace (app.workspace_id) may name the repository at p_path:
-- 'granted', 'unregistered' (not registered to it), or 'exclusive' (registered to it, but also
-- registered, not shared, to another workspace: a row written by hand, or a registration that
-- changed). Another workspace's rows are invisible under RLS, hence SECURITY DEFINER; it answers
-- only for the caller's own workspace and names no other.
create function echodo_repo_access(p_path text)
returns text
language sql stable security definer set search_path = public as $$
  with me as (select nullif(current_setting('app.workspace_id', true), '') as ws),
  mine as (select g.shared from repo_grants g, me where g.workspace_id = me.ws and g.path = p_path)
  select case
    when not exists (select 1 from mine) then 'unregistered'
    when exists (select 1 from repo_grants g, me
                  where g.path = p_path and g.workspace_id <> me.ws
                    and (not g.shared or not (select m.shared from mine m)))
      then 'exclusive'
    else 'granted'
  end
$$;

revoke all on function echodo_repo_access(text) from public;
grant execute on function echodo_repo_access(text) to echodo_app;

-- Every registered repository's path (paths only, no workspace): the worker refuses to start when
-- ECHODO_HOME lies inside one, as it does for WORKER_REPO_ROOT and WORKER_WORKTREE_BASE.
create function echodo_registered_repo_paths()
returns table (path text)
language sql stable security definer set search_path = public as $$
  select distinct g.path from repo_grants g order by 1
$$;

revoke all on function echodo_registered_repo_paths() from public;
grant execute on function echodo_registered_repo_paths() to echodo_app;
