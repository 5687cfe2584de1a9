-- What a remote agent needs to go on after a resume, and what the run was run by.
--
-- worker_checkpoints.agent_state: a remote adapter's own state as of the checkpoint (worker/adapters/):
-- the thread the agent reported and the agent's last state (STATE_SNAPSHOT / STATE_DELTA), bounded and
-- redacted by the worker. A resume sends it back as the next AG-UI run's state. Not part of the
-- checkpoint's hash: it is the remote agent's, not the run's tree.
alter table worker_checkpoints
  add column agent_state jsonb check (agent_state is null or jsonb_typeof(agent_state) = 'object');

-- agent_runs.adapter: the adapter of the harness the run was claimed with (a harness edited later
-- does not rewrite what a run was run by). Null until a worker claims it.
alter table agent_runs
  add column adapter text check (adapter is null or adapter in ('minimal', 'remote-ag-ui', 'langgraph', 'crewai'));

-- The start-up registration of secrets (worker/secrets.ts) also covers the header key variables of
-- remote harnesses: names only, of every workspace, as for the model providers' keys.
create or replace function echodo_api_key_env_vars()
returns table (api_key_env_var text)
language sql stable security definer set search_path = public as $$
  select v from (
    select p.api_key_env_var as v from model_providers p
    union
    select h.key_env_var from harness_providers h
  ) names
   where v is not null and v <> ''
   order by 1
$$;
