-- Mission control tokens have a lifecycle: a kind (admin, read-write, read-only), an optional
-- expiry, and a revocation. An expired or revoked token is answered exactly like an unknown one
-- (401). Tokens are listed and revoked by the operator's CLI across workspaces, so through
-- SECURITY DEFINER functions; the list never includes a token's hash.
alter table mission_control_tokens
  add column kind       text not null default 'read-write',
  add column expires_at timestamptz,
  add column revoked_at timestamptz;
update mission_control_tokens set kind = 'admin' where is_admin;
alter table mission_control_tokens
  add constraint mission_control_tokens_kind check (kind in ('admin', 'read-write', 'read-only')),
  add constraint mission_control_tokens_kind_admin check ((kind = 'admin') = is_admin);

-- The lookup now says which token it is (for "who did this" in events) and what it may do.
drop function echodo_token_lookup(text);
create function echodo_token_lookup(p_sha256 text)
returns table (id bigint, workspace_id text, is_admin boolean, kind text, expires_at timestamptz)
language sql security definer set search_path = public as $$
  with found as (
    select t.id, t.workspace_id, t.is_admin, t.kind, t.expires_at, t.last_used_at
      from mission_control_tokens t
     where t.token_sha256 = p_sha256
       and t.revoked_at is null
       and (t.expires_at is null or t.expires_at > now())
       and (t.is_admin or exists (select 1 from workspaces w where w.workspace_id = t.workspace_id))
  ), touched as (
    update mission_control_tokens t set last_used_at = now()
      from found f
     where t.id = f.id and (f.last_used_at is null or f.last_used_at < now() - interval '1 minute')
  )
  select f.id, f.workspace_id, f.is_admin, f.kind, f.expires_at from found f
$$;

drop function echodo_admin_token_create(text);
create function echodo_admin_token_create(p_sha256 text, p_expires_at timestamptz default null)
returns bigint
language sql security definer set search_path = public as $$
  insert into mission_control_tokens (workspace_id, is_admin, kind, token_sha256, expires_at)
  values ('', true, 'admin', p_sha256, p_expires_at)
  returning id
$$;

-- Every token (or one workspace's), newest first: never the hash.
create function echodo_token_list(p_workspace_id text)
returns table (id bigint, workspace_id text, kind text, created_at timestamptz, last_used_at timestamptz,
               expires_at timestamptz, revoked_at timestamptz)
language sql stable security definer set search_path = public as $$
  select t.id, t.workspace_id, t.kind, t.created_at, t.last_used_at, t.expires_at, t.revoked_at
    from mission_control_tokens t
   where p_workspace_id is null or t.workspace_id = p_workspace_id
   order by t.id
$$;

-- 'revoked', 'already revoked', or null for an unknown id.
create function echodo_token_revoke(p_id bigint)
returns text
language sql security definer set search_path = public as $$
  with target as (select t.id, t.revoked_at from mission_control_tokens t where t.id = p_id for update),
  done as (update mission_control_tokens t set revoked_at = now() from target where t.id = target.id and target.revoked_at is null returning t.id)
  select case when exists (select 1 from done) then 'revoked' when exists (select 1 from target) then 'already revoked' end
$$;

revoke all on function echodo_token_lookup(text), echodo_admin_token_create(text, timestamptz),
  echodo_token_list(text), echodo_token_revoke(bigint) from public;
grant execute on function echodo_token_lookup(text), echodo_admin_token_create(text, timestamptz),
  echodo_token_list(text), echodo_token_revoke(bigint) to echodo_app;
