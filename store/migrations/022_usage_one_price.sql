-- Every model call's usage, and the one definition of its price (docs/operations.md, "Cost and budgets").
--
-- A run's last model call answers with text and calls no tool, so no checkpoint records it: its usage
-- is kept on the run (null: the run ended without such a call). Its keys are a RoundUsage's
-- (inputTokens, outputTokens, cacheReadTokens, cacheWriteTokens, reasoningTokens, modelId).
alter table agent_runs add column final_usage jsonb check (final_usage is null or jsonb_typeof(final_usage) = 'object');

-- The usage of every recorded model call: the checkpoint rows, and the runs' final answers
-- (checkpoint_seq null). security_invoker: a reader sees what row-level security lets it see.
create view model_usage with (security_invoker = true) as
  select c.workspace_id, c.agent_run_id, c.convoy_id, c.checkpoint_seq, c.occurred_at, c.model_id, c.input_tokens,
         c.output_tokens, c.cache_read_tokens, c.cache_write_tokens, c.reasoning_tokens
    from worker_checkpoints c
  union all
  select r.workspace_id, r.id, r.convoy_id, null::integer, r.finished_at, r.final_usage->>'modelId',
         (r.final_usage->>'inputTokens')::bigint, (r.final_usage->>'outputTokens')::bigint,
         (r.final_usage->>'cacheReadTokens')::bigint, (r.final_usage->>'cacheWriteTokens')::bigint,
         (r.final_usage->>'reasoningTokens')::bigint
    from agent_runs r where r.final_usage is not null;
grant select on model_usage to echodo_app;

-- The price of every usage record (USD; null: unpriced, because the call reported no usage or its
-- model has no price). The one definition, for one workspace (store/cost.ts, under row-level
-- security) and for the fleet (the functions below): the workspace's own price of the longest
-- matching name, else the shipped one (passed in: it is data in the code, core/prices.json). A
-- model id matches a name it equals or extends with "-"; cache tokens are counted within input.
-- Plain SQL, not security definer: the planner inlines it, so a caller's filter reaches the tables.
create function echodo_costed_usage(p_shipped jsonb)
returns table (workspace_id text, agent_run_id text, convoy_id text, checkpoint_seq integer,
               occurred_at timestamptz, model_id text, input_tokens bigint, output_tokens bigint,
               cache_read_tokens bigint, cache_write_tokens bigint, reasoning_tokens bigint, cost_usd numeric)
language sql stable as $$
  with shipped as materialized (
    select s.model, s."inputPerMtok" as i, s."outputPerMtok" as o, s."cacheReadPerMtok" as cr,
           s."cacheWritePerMtok" as cw
      from jsonb_to_recordset(p_shipped) as s(model text, "inputPerMtok" numeric, "outputPerMtok" numeric,
           "cacheReadPerMtok" numeric, "cacheWritePerMtok" numeric)
  )
  select u.workspace_id, u.agent_run_id, u.convoy_id, u.checkpoint_seq, u.occurred_at, u.model_id, u.input_tokens,
         u.output_tokens, u.cache_read_tokens, u.cache_write_tokens, u.reasoning_tokens,
         case when p.model is null or u.input_tokens is null or u.output_tokens is null then null
         else (greatest(u.input_tokens - coalesce(u.cache_read_tokens, 0) - coalesce(u.cache_write_tokens, 0), 0) * p.i
               + coalesce(u.cache_read_tokens, 0) * coalesce(p.cr, p.i)
               + coalesce(u.cache_write_tokens, 0) * coalesce(p.cw, p.i)
               + u.output_tokens * p.o) / 1000000 end
    from model_usage u
    left join lateral (
      select * from (
        select m.model, m.input_per_mtok as i, m.output_per_mtok as o, m.cache_read_per_mtok as cr,
               m.cache_write_per_mtok as cw, 0 as rank
          from model_prices m where m.workspace_id = u.workspace_id
        union all
        select s.model, s.i, s.o, s.cr, s.cw, 1 from shipped s
      ) p
       where u.model_id = p.model or left(u.model_id, length(p.model) + 1) = p.model || '-'
       order by length(p.model) desc, p.rank limit 1
    ) p on true
$$;
grant execute on function echodo_costed_usage(jsonb) to echodo_app;

-- The fleet's cost and tokens: the same records, through that one definition.
create or replace function echodo_fleet_cost(p_shipped jsonb)
returns table (workspace_id text, model_id text, cost_usd double precision, unpriced bigint)
language sql stable security definer set search_path = public as $$
  select c.workspace_id, c.model_id, coalesce(sum(c.cost_usd), 0)::float8, count(*) filter (where c.cost_usd is null)
    from echodo_costed_usage(p_shipped) c where c.model_id is not null group by 1, 2
$$;

create or replace function echodo_fleet_tokens()
returns table (workspace_id text, model_id text, input bigint, output bigint, cache_read bigint, cache_write bigint,
               reasoning bigint)
language sql stable security definer set search_path = public as $$
  select u.workspace_id, u.model_id, sum(u.input_tokens)::bigint, sum(u.output_tokens)::bigint,
         sum(u.cache_read_tokens)::bigint, sum(u.cache_write_tokens)::bigint, sum(u.reasoning_tokens)::bigint
    from model_usage u where u.model_id is not null group by 1, 2
$$;

-- The fleet page: each workspace's spend since a moment (its UTC day), its daily cap, and the runs a
-- budget stopped since then.
create function echodo_fleet_spend(p_shipped jsonb, p_since timestamptz)
returns table (workspace_id text, tokens bigint, cost_usd double precision, unpriced bigint, daily_usd double precision,
               budget_exhausted bigint)
language sql stable security definer set search_path = public as $$
  select w.workspace_id, coalesce(s.tokens, 0), coalesce(s.cost, 0), coalesce(s.unpriced, 0), b.daily_usd::float8,
         (select count(*) from agent_runs r
           where r.workspace_id = w.workspace_id and r.status = 'budget_exhausted' and r.finished_at >= p_since)
    from workspaces w
    left join (
      select c.workspace_id, sum(coalesce(c.input_tokens, 0) + coalesce(c.output_tokens, 0))::bigint as tokens,
             sum(c.cost_usd)::float8 as cost, count(*) filter (where c.cost_usd is null) as unpriced
        from echodo_costed_usage(p_shipped) c where c.occurred_at >= p_since group by 1
    ) s on s.workspace_id = w.workspace_id
    left join workspace_budgets b on b.workspace_id = w.workspace_id
$$;
revoke all on function echodo_fleet_spend(jsonb, timestamptz) from public;
grant execute on function echodo_fleet_spend(jsonb, timestamptz) to echodo_app;

-- The stall detector's sweeps, for /metrics: runs it re-dispatched (a lease expired while running)
-- and re-enqueued (queued too long), counted from their events, by workspace.
create index convoy_events_stall_sweeps on convoy_events (workspace_id, type)
  where type in ('run_redispatched', 'run_reenqueued') and metadata->>'reason' is distinct from 'requested';

create function echodo_fleet_stall_sweeps()
returns table (workspace_id text, kind text, runs bigint)
language sql stable security definer set search_path = public as $$
  select e.workspace_id, case e.type when 'run_redispatched' then 'redispatched' else 'reenqueued' end, count(*)
    from convoy_events e
   where e.type in ('run_redispatched', 'run_reenqueued') and e.metadata->>'reason' is distinct from 'requested'
   group by 1, 2
$$;
revoke all on function echodo_fleet_stall_sweeps() from public;
grant execute on function echodo_fleet_stall_sweeps() to echodo_app;
