-- Agent adapters (docs/worker.md, "Agent adapters and AG-UI"): a harness names the agent that runs
-- it. `minimal` is the worker's own model loop; the others are remote AG-UI agents the worker
-- drives as a client, executing their tool calls in the run's tree. A remote adapter needs the
-- endpoint; its optional header key is named by variable (never stored) and granted like a
-- model key (key_grants), so it goes only to the granted hosts.
alter table harness_providers
  add column adapter text not null default 'minimal'
    check (adapter in ('minimal', 'remote-ag-ui', 'langgraph', 'crewai')),
  add column endpoint_url text check (endpoint_url is null or endpoint_url ~ '^https?://'),
  add column key_env_var text check (key_env_var is null or key_env_var ~ '^[A-Za-z_][A-Za-z0-9_]*$'),
  add constraint harness_providers_remote_endpoint
    check (adapter = 'minimal' or endpoint_url is not null);
