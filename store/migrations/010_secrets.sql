-- Secrets (docs/security.md, "Secrets: one choke point"): every process that persists or logs
-- registers, at start-up, the values of every variable ANY workspace's model provider names as
-- its key, so a variable named by workspace B's row is redacted in workspace A's output too.
-- Names only, never values (the values live in the worker's environment, not in Postgres).
create function echodo_api_key_env_vars()
returns table (api_key_env_var text)
language sql stable security definer set search_path = public as $$
  select distinct p.api_key_env_var from model_providers p
   where p.api_key_env_var is not null and p.api_key_env_var <> ''
   order by 1
$$;

revoke all on function echodo_api_key_env_vars() from public;
-- Callable from the app role too: an app-only deployment (DATABASE_APP_URL) still registers them.
grant execute on function echodo_api_key_env_vars() to echodo_app;
