-- The operator panel at fleet scale: keyset pages over runs and convoys (newest first), and
-- the hash chain's verdict kept per run so a timeline page never re-verifies what was verified.

create index agent_runs_newest on agent_runs (workspace_id, created_at desc, id desc);
create index convoys_newest on convoys (workspace_id, created_at desc, id desc);

-- How far a run's chain has been verified: every row up to verified_seq links and hashes, the
-- last of them has verified_hash. broken_seq is the first row that did not verify (the verdict
-- then stays "broken at N" and nothing after it is verified). Rows are immutable once written,
-- so a verified prefix stays verified; pruning removes old rows but keeps the anchor.
create table checkpoint_chain_verdicts (
  workspace_id  text not null references workspaces on delete cascade,
  agent_run_id  text not null,
  verified_seq  integer not null default 0,
  verified_hash text,
  broken_seq    integer,
  problem       text,
  updated_at    timestamptz not null default now(),
  primary key (workspace_id, agent_run_id),
  foreign key (workspace_id, agent_run_id) references agent_runs (workspace_id, id) on delete cascade
);
alter table checkpoint_chain_verdicts enable row level security;
alter table checkpoint_chain_verdicts force row level security;
create policy workspace_isolation on checkpoint_chain_verdicts
  using (workspace_id = nullif(current_setting('app.workspace_id', true), ''))
  with check (workspace_id = nullif(current_setting('app.workspace_id', true), ''));
grant select, insert, update, delete on checkpoint_chain_verdicts to echodo_app;

-- A workspace's storage policy: retention (keep the last keep_last checkpoints of a finished run
-- once it is keep_days old) and a quota in bytes. used_bytes is what the stall detector's storage
-- sweep last measured; dispatch refuses new runs while it is over quota_bytes.
create table workspace_storage_policies (
  workspace_id text primary key references workspaces on delete cascade,
  keep_last    integer check (keep_last >= 1),
  keep_days    integer check (keep_days >= 0),
  quota_bytes  bigint check (quota_bytes >= 0),
  used_bytes   bigint,
  measured_at  timestamptz,
  updated_at   timestamptz not null default now()
);
alter table workspace_storage_policies enable row level security;
alter table workspace_storage_policies force row level security;
create policy workspace_isolation on workspace_storage_policies
  using (workspace_id = nullif(current_setting('app.workspace_id', true), ''))
  with check (workspace_id = nullif(current_setting('app.workspace_id', true), ''));
grant select, insert, update, delete on workspace_storage_policies to echodo_app;

-- The storage sweep visits each workspace that has a policy; the list crosses workspaces, so it
-- is a security-definer function that names workspaces only.
create function echodo_storage_policy_workspaces()
returns table (workspace_id text)
language sql stable security definer set search_path = public as $$
  select p.workspace_id from workspace_storage_policies p order by p.workspace_id
$$;
revoke all on function echodo_storage_policy_workspaces() from public;
grant execute on function echodo_storage_policy_workspaces() to echodo_app;
