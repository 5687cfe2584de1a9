-- The app's own login role. Processes used to connect with the superuser URL and switch to
-- echodo_app with `-c role=echodo_app`, so `SET ROLE postgres` gave any app connection the
-- superuser back. Now every runtime connection logs in as echodo_app_login: no superuser,
-- no BYPASSRLS, no CREATEROLE/CREATEDB/REPLICATION, and a member of echodo_app only, so there
-- is no privileged role it may SET ROLE to. The superuser URL is used only to migrate.
--
-- The password is not known here: the migrating process generates it, keeps it in
-- ECHODO_HOME/app-role.json and sets it after migrating (store/app-role.ts). An operator who
-- manages roles instead grants echodo_app to a login of their own and sets DATABASE_APP_URL.
-- Roles are cluster-wide: an existing role of this name is reused, never re-created.
do $$ begin
  if not exists (select 1 from pg_roles where rolname = 'echodo_app_login') then
    create role echodo_app_login login nosuperuser nobypassrls nocreatedb nocreaterole noreplication inherit;
  end if;
end $$;
grant echodo_app to echodo_app_login;

-- The app checks at start-up that the schema is not newer than its code.
grant select on schema_migrations to echodo_app;

-- The cross-workspace system functions (SECURITY DEFINER, owned by the migrating superuser)
-- were called over the superuser connection; the app role calls them now. Each is narrow:
-- take the next queued run, list stalled or prunable runs, record a dead letter, look up a
-- token, create an admin token, the fleet rollup.
grant execute on function
  echodo_take_queued_run(integer),
  echodo_stalled_runs(integer),
  echodo_dead_letter(text, text, text, text),
  echodo_token_lookup(text),
  echodo_admin_token_create(text),
  echodo_fleet_summary(),
  echodo_prunable_runs(interval)
to echodo_app;
