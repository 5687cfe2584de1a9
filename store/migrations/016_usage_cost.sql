-- Usage, cost and budgets (docs/worker.md, "Usage, cost and budgets").
--
-- Each checkpoint row carries the usage of the rounds it records, as the provider reported it, and
-- the model that answered. A null column means the provider did not say (the replay model, an
-- endpoint without usage): unknown is never written as 0, so a sum over a run stays honest.
alter table worker_checkpoints
  add column model_id           text,
  add column input_tokens       bigint check (input_tokens >= 0),
  add column output_tokens      bigint check (output_tokens >= 0),
  add column cache_read_tokens  bigint check (cache_read_tokens >= 0),
  add column cache_write_tokens bigint check (cache_write_tokens >= 0),
  add column reasoning_tokens   bigint check (reasoning_tokens >= 0);

-- Native providers: the SDK knows their endpoint, so base_url is optional for them (tests and
-- proxies still set it); an OpenAI-compatible endpoint has no default and must name one.
alter table model_providers drop constraint if exists model_providers_provider_check;
alter table model_providers
  alter column base_url drop not null,
  add constraint model_providers_provider_check
    check (provider in ('openai-compatible', 'anthropic', 'openai')),
  add constraint model_providers_base_url_needed
    check (provider <> 'openai-compatible' or base_url is not null);

-- A run stopped by a budget keeps its checkpoints and may be retried with a new limit (its limits
-- are in its recorded job: maxCostUsd, maxTokens).
alter table agent_runs drop constraint if exists agent_runs_status_check;
alter table agent_runs
  add constraint agent_runs_status_check
    check (status in ('queued', 'running', 'completed', 'failed', 'cancelled', 'budget_exhausted'));

-- A workspace's own prices (USD per million tokens), overriding the shipped table (core/prices.json).
create table model_prices (
  workspace_id         text not null references workspaces on delete cascade,
  model                text not null check (length(model) between 1 and 200),
  input_per_mtok       numeric not null check (input_per_mtok >= 0),
  output_per_mtok      numeric not null check (output_per_mtok >= 0),
  cache_read_per_mtok  numeric check (cache_read_per_mtok >= 0),
  cache_write_per_mtok numeric check (cache_write_per_mtok >= 0),
  updated_at           timestamptz not null default now(),
  primary key (workspace_id, model)
);

-- A workspace's daily spending cap (UTC days).
create table workspace_budgets (
  workspace_id text primary key references workspaces on delete cascade,
  daily_usd    numeric not null check (daily_usd >= 0),
  updated_at   timestamptz not null default now()
);

do $$
declare t text;
begin
  foreach t in array array['model_prices', 'workspace_budgets'] loop
    execute format('alter table %I enable row level security', t);
    execute format('alter table %I force row level security', t);
    execute format($p$create policy workspace_isolation on %I
                      using (workspace_id = nullif(current_setting('app.workspace_id', true), ''))
                      with check (workspace_id = nullif(current_setting('app.workspace_id', true), ''))$p$, t);
    execute format('grant select, insert, update, delete on %I to echodo_app', t);
  end loop;
end $$;

create index worker_checkpoints_day on worker_checkpoints (workspace_id, occurred_at);

-- Fleet metrics for mission control's /metrics: counts across workspaces, no row of any. The app
-- role sees one workspace at a time under RLS; these answer aggregates only, hence SECURITY DEFINER.
create function echodo_fleet_run_counts()
returns table (workspace_id text, status text, runs bigint)
language sql stable security definer set search_path = public as $$
  select r.workspace_id, r.status, count(*) from agent_runs r group by 1, 2
$$;

create function echodo_fleet_queue()
returns table (depth bigint, oldest_age_s double precision)
language sql stable security definer set search_path = public as $$
  select count(*), coalesce(extract(epoch from now() - min(r.queued_at)), 0)::float8
    from agent_runs r where r.status = 'queued'
$$;

create function echodo_fleet_tokens()
returns table (workspace_id text, model_id text, input bigint, output bigint, cache_read bigint, cache_write bigint,
               reasoning bigint)
language sql stable security definer set search_path = public as $$
  select c.workspace_id, c.model_id, sum(c.input_tokens)::bigint, sum(c.output_tokens)::bigint,
         sum(c.cache_read_tokens)::bigint, sum(c.cache_write_tokens)::bigint, sum(c.reasoning_tokens)::bigint
    from worker_checkpoints c where c.model_id is not null group by 1, 2
$$;

-- Cost by workspace and model, priced as store/cost.ts prices one workspace's rows (keep the two in step): the
-- workspace's own price of the longest matching name, else the shipped one (passed in: it is data in the code).
create function echodo_fleet_cost(p_shipped jsonb)
returns table (workspace_id text, model_id text, cost_usd double precision, unpriced bigint)
language sql stable security definer set search_path = public as $$
  with shipped as (
    select s.model, s."inputPerMtok" as i, s."outputPerMtok" as o, s."cacheReadPerMtok" as cr, s."cacheWritePerMtok" as cw
      from jsonb_to_recordset(p_shipped) as s(model text, "inputPerMtok" numeric, "outputPerMtok" numeric,
           "cacheReadPerMtok" numeric, "cacheWritePerMtok" numeric)
  ), costed as (
    select c.workspace_id, c.model_id,
           case when p.model is null or c.input_tokens is null or c.output_tokens is null then null
           else (greatest(c.input_tokens - coalesce(c.cache_read_tokens, 0) - coalesce(c.cache_write_tokens, 0), 0) * p.i
                 + coalesce(c.cache_read_tokens, 0) * coalesce(p.cr, p.i)
                 + coalesce(c.cache_write_tokens, 0) * coalesce(p.cw, p.i)
                 + c.output_tokens * p.o) / 1000000 end as cost
      from worker_checkpoints c
      left join lateral (
        select * from (
          select m.model, m.input_per_mtok as i, m.output_per_mtok as o, m.cache_read_per_mtok as cr,
                 m.cache_write_per_mtok as cw, 0 as rank
            from model_prices m where m.workspace_id = c.workspace_id
          union all
          select s.model, s.i, s.o, s.cr, s.cw, 1 from shipped s
        ) p
         where c.model_id = p.model or left(c.model_id, length(p.model) + 1) = p.model || '-'
         order by length(p.model) desc, p.rank limit 1
      ) p on true
     where c.model_id is not null
  )
  select workspace_id, model_id, coalesce(sum(cost), 0)::float8, count(*) filter (where cost is null)
    from costed group by 1, 2
$$;

revoke all on function echodo_fleet_run_counts(), echodo_fleet_queue(), echodo_fleet_tokens(), echodo_fleet_cost(jsonb)
  from public;
grant execute on function echodo_fleet_run_counts(), echodo_fleet_queue(), echodo_fleet_tokens(), echodo_fleet_cost(jsonb)
  to echodo_app;
