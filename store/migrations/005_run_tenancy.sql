-- Run tenancy. A run id is unique per workspace, not globally: a duplicate id from another
-- workspace used to hit the global primary key, and the constraint error confirmed that the id
-- existed elsewhere. Every table that points at a run now points at (workspace_id, id).
-- And a branch belongs to the run that created it: branch_claims records, per repository
-- (the realpath of its common git dir) and branch name, the owning workspace and run.

-- ------------------------------------------------ agent_runs keyed by (workspace_id, id)
-- Foreign keys to agent_runs(id) become (workspace_id, <column>) → (workspace_id, id), whatever
-- their name, so tables added by other migrations before this one follow too.
create temporary table echodo_run_fks (tbl regclass, col name, conname name, ondelete "char") on commit drop;
insert into echodo_run_fks
  select c.conrelid::regclass, a.attname, c.conname, c.confdeltype
    from pg_constraint c
    join pg_attribute a on a.attrelid = c.conrelid and a.attnum = c.conkey[1]
   where c.contype = 'f' and c.confrelid = 'agent_runs'::regclass and cardinality(c.conkey) = 1;

do $$
declare fk record;
begin
  for fk in select * from echodo_run_fks loop
    execute format('alter table %s drop constraint %I', fk.tbl, fk.conname);
  end loop;
end $$;

alter table agent_runs drop constraint agent_runs_pkey;
alter table agent_runs add constraint agent_runs_pkey primary key (workspace_id, id);

-- Checkpoint seqs and anchors are per run, so per (workspace, run).
alter table worker_checkpoints drop constraint if exists worker_checkpoints_agent_run_id_checkpoint_seq_key;
alter table worker_checkpoints add constraint worker_checkpoints_run_seq_key unique (workspace_id, agent_run_id, checkpoint_seq);
alter table checkpoint_anchors drop constraint checkpoint_anchors_pkey;
alter table checkpoint_anchors add constraint checkpoint_anchors_pkey primary key (workspace_id, agent_run_id);

do $$
declare fk record;
begin
  for fk in select * from echodo_run_fks loop
    execute format('alter table %s add constraint %I foreign key (workspace_id, %I) references agent_runs (workspace_id, id) on delete %s',
                   fk.tbl, fk.conname, fk.col,
                   case fk.ondelete when 'c' then 'cascade' when 'n' then 'set null' when 'r' then 'restrict' else 'no action' end);
  end loop;
end $$;

-- The queue take reserved `where r.id = (…)`: with ids unique per workspace only, that would
-- reserve every workspace's run of that id. It now names the run by (workspace_id, id).
create or replace function echodo_take_queued_run(p_visibility_ms integer)
returns table (workspace_id text, agent_run_id text, job jsonb)
language sql security definer set search_path = public as $$
  update agent_runs r
     set available_at = now() + make_interval(secs => p_visibility_ms / 1000.0)
   where (r.workspace_id, r.id) = (select q.workspace_id, q.id from agent_runs q
                                    where q.status = 'queued' and q.available_at <= now()
                                    order by q.available_at, q.created_at
                                    for update skip locked limit 1)
  returning r.workspace_id, r.id, r.job
$$;
revoke all on function echodo_take_queued_run(integer) from public;

-- ------------------------------------------------ branch ownership
create table branch_claims (
  repo_dir     text not null,     -- realpath of the repository's common git dir
  branch       text not null,     -- without refs/heads/
  workspace_id text not null references workspaces on delete cascade,
  agent_run_id text not null,
  claimed_at   timestamptz not null default now(),
  primary key (repo_dir, branch),
  foreign key (workspace_id, agent_run_id) references agent_runs (workspace_id, id) on delete cascade
);
create index branch_claims_run on branch_claims (workspace_id, agent_run_id);
alter table branch_claims enable row level security;
alter table branch_claims force row level security;
create policy workspace_isolation on branch_claims
  using (workspace_id = nullif(current_setting('app.workspace_id', true), ''))
  with check (workspace_id = nullif(current_setting('app.workspace_id', true), ''));
-- A workspace reads its own claims; it never inserts one itself (a unique violation on another
-- workspace's claim would confirm it): claims go through echodo_claim_branch.
grant select on branch_claims to echodo_app;

-- Claims p_branch of the repository p_repo_dir for run p_agent_run_id of the transaction's
-- workspace (app.workspace_id), if nobody owns it and p_may_create (the caller found no such
-- git branch: an existing branch without an owner was made outside the product and is never
-- adopted). Answers only 'yours' or 'taken': whose it is, is not said.
create function echodo_claim_branch(p_repo_dir text, p_branch text, p_agent_run_id text, p_may_create boolean)
returns text
language plpgsql security definer set search_path = public as $$
declare
  ws text := nullif(current_setting('app.workspace_id', true), '');
  owner_ws text;
  owner_run text;
begin
  if ws is null then
    raise exception 'echodo_claim_branch: no workspace is set in this transaction';
  end if;
  if not exists (select 1 from agent_runs r where r.workspace_id = ws and r.id = p_agent_run_id) then
    raise exception 'echodo_claim_branch: run % does not exist in this workspace', p_agent_run_id;
  end if;
  if p_may_create then
    insert into branch_claims (repo_dir, branch, workspace_id, agent_run_id)
    values (p_repo_dir, p_branch, ws, p_agent_run_id)
    on conflict do nothing;
  end if;
  select c.workspace_id, c.agent_run_id into owner_ws, owner_run
    from branch_claims c where c.repo_dir = p_repo_dir and c.branch = p_branch;
  return case when owner_ws = ws and owner_run = p_agent_run_id then 'yours' else 'taken' end;
end $$;
revoke all on function echodo_claim_branch(text, text, text, boolean) from public;
grant execute on function echodo_claim_branch(text, text, text, boolean) to echodo_app;
