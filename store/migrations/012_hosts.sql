-- Many hosts (docs/checkpoints.md): the host whose worker recorded the run's worktree. A worker on
-- another host resuming the run fetches its checkpoints from WORKER_CHECKPOINT_REMOTE instead of
-- trusting a worktree path that is on someone else's disk. Null for runs recorded before.
alter table agent_runs add column host_id text;
