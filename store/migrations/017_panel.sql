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
