-- Checkpoints hold what changed, not everything so far (issue 14).
-- A row's files_touched is this checkpoint's files, its tool_history this checkpoint's tool
-- calls; the row also carries the commit's tree and a digest of the run's whole manifest (every
-- path the run ever touched with its sha256), all covered by the hash chain. The manifest itself
-- lives in checkpoint_manifest, one row per path updated in place with the checkpoint row, so
-- storage and verification are O(changed) per checkpoint and O(manifest) per check, never
-- O(checkpoints), and it survives pruning.
--
-- payload_format: 1 = a pre-008 cumulative row, hashed as stored; 2 = a pre-008 row rewritten
-- here into its delta, still verified by its old hash against the cumulative payload rebuilt by
-- folding the deltas and keeping the last legacy_window history entries; 3 = a delta row.
-- Defaults to 1 so an old-shape insert keeps meaning what it meant.
alter table worker_checkpoints
  add column payload_format  smallint not null default 1 check (payload_format in (1, 2, 3)),
  add column tree_oid        text,
  add column manifest_digest text,
  add column manifest_count  integer,
  add column legacy_window   integer;

create table checkpoint_manifest (
  workspace_id text not null references workspaces on delete cascade,
  agent_run_id text not null,
  path         text not null,
  sha256       bytea,             -- null: deleted by the run
  seq          integer not null,  -- the checkpoint that last changed it
  primary key (workspace_id, agent_run_id, path),
  foreign key (workspace_id, agent_run_id) references agent_runs (workspace_id, id) on delete cascade
);
alter table checkpoint_manifest enable row level security;
alter table checkpoint_manifest force row level security;
create policy workspace_isolation on checkpoint_manifest
  using (workspace_id = nullif(current_setting('app.workspace_id', true), ''))
  with check (workspace_id = nullif(current_setting('app.workspace_id', true), ''));
grant select, insert, update, delete on checkpoint_manifest to echodo_app;

-- ------------------------------------------------ existing rows: cumulative → delta
-- Each row with the one before it in its run (chains are contiguous: pruning keeps a suffix).
create temporary table echodo_cp on commit drop as
select c.id, c.workspace_id, c.agent_run_id, c.checkpoint_seq, c.files_touched, c.tool_history,
       lag(c.checkpoint_seq) over w as prev_seq,
       lag(c.files_touched) over w as prev_files,
       lag(c.tool_history) over w as prev_history,
       lead(c.checkpoint_seq) over w is null as is_latest
  from worker_checkpoints c
 where c.payload_format = 1
window w as (partition by c.workspace_id, c.agent_run_id order by c.checkpoint_seq);

-- Every (row, file entry), marked changed when the row before had no entry for that path or a
-- different one.
create temporary table echodo_cp_files on commit drop as
select f.*, (f.prev_seq is null or f.path_prev_seq is distinct from f.prev_seq or f.path_prev_elem is distinct from f.elem) as changed
  from (select r.id, r.workspace_id, r.agent_run_id, r.checkpoint_seq, r.prev_seq, e.elem, e.ord, e.elem ->> 'path' as path,
               lag(r.checkpoint_seq) over p as path_prev_seq, lag(e.elem) over p as path_prev_elem
          from echodo_cp r
         cross join lateral jsonb_array_elements(r.files_touched) with ordinality as e(elem, ord)
        window p as (partition by r.workspace_id, r.agent_run_id, e.elem ->> 'path' order by r.checkpoint_seq)) f;

create index on echodo_cp_files (id);

-- The manifest of each run: its latest row's cumulative list, each path with the last seq that changed it.
insert into checkpoint_manifest (workspace_id, agent_run_id, path, sha256, seq)
select f.workspace_id, f.agent_run_id, f.path,
       case when f.elem -> 'deleted' = 'true'::jsonb or coalesce(f.elem ->> 'sha256', '') !~ '^[0-9a-f]{64}$' then null
            else decode(f.elem ->> 'sha256', 'hex') end,
       coalesce(s.seq, f.checkpoint_seq)
  from echodo_cp_files f
  join echodo_cp r on r.id = f.id and r.is_latest
  left join (select workspace_id, agent_run_id, path, max(checkpoint_seq) as seq
               from echodo_cp_files where changed group by workspace_id, agent_run_id, path) s
         on s.workspace_id = f.workspace_id and s.agent_run_id = f.agent_run_id and s.path = f.path
 where f.path is not null
on conflict do nothing;

-- The delta of each row, and a check that folding it onto the row before rebuilds this row
-- exactly: the files never shrink, and the history window is a suffix of (window before ++ new
-- entries). A row that fails the check keeps format 1 (stored whole), so the fold restarts there.
-- Each run's latest row stays format 1 too: pruning may keep it alone, and it then verifies
-- by itself (one cumulative row per run is the migration's whole cost).
create temporary table echodo_cp_delta on commit drop as
select r.id, r.prev_seq, r.is_latest, r.tool_history,
       coalesce(r.prev_history, '[]'::jsonb) as prev_history,
       coalesce((select jsonb_agg(f.elem order by f.ord) from echodo_cp_files f where f.id = r.id and f.changed), '[]'::jsonb) as files,
       jsonb_typeof(r.files_touched) = 'array'
         and (r.prev_seq is null or jsonb_array_length(r.prev_files) =
              (select count(*) from echodo_cp_files f where f.id = r.id and f.path_prev_seq = r.prev_seq)) as files_fold,
       coalesce((select jsonb_agg(h.elem order by h.ord)
                   from jsonb_array_elements(r.tool_history) with ordinality as h(elem, ord)
                  where r.prev_seq is null
                     or jsonb_typeof(h.elem -> 'round') <> 'number'
                     or (h.elem ->> 'round')::numeric > coalesce((select max((p.elem ->> 'round')::numeric)
                                                                    from jsonb_array_elements(r.prev_history) as p(elem)
                                                                   where jsonb_typeof(p.elem -> 'round') = 'number'), -1)),
                '[]'::jsonb) as history
  from echodo_cp r
 where not r.is_latest and jsonb_typeof(r.tool_history) = 'array'
   and (r.prev_seq is null or jsonb_typeof(r.prev_history) = 'array');

update worker_checkpoints c
   set payload_format = 2, files_touched = d.files, tool_history = d.history,
       legacy_window = jsonb_array_length(d.tool_history)
  from echodo_cp_delta d
 where c.id = d.id and d.files_fold
   and (select coalesce(jsonb_agg(x.elem order by x.ord), '[]'::jsonb)
          from jsonb_array_elements(d.prev_history || d.history) with ordinality as x(elem, ord)
         where x.ord > jsonb_array_length(d.prev_history || d.history) - jsonb_array_length(d.tool_history)) = d.tool_history;
