-- The storage quota counts git as well as Postgres: used_bytes is now the sum the storage sweep
-- measured, and git_bytes its git part (the workspace's branches and checkpoint notes, estimated
-- from the objects reachable only from them), so a refusal can name both.
alter table workspace_storage_policies add column git_bytes bigint;
