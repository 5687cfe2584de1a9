-- Doc runs end in review. A doc-writer run writes straight into the repository (no branch, no
-- commit), so its brief does not end `done`: it ends `doc_review`, and an operator either
-- publishes it (`published`, terminal) or sends it back with a note (the brief opens again and
-- the same run is retried). The files and their sha256 are the run's manifest
-- (checkpoint_manifest), snapshotted in the doc_review and doc_published events.
alter table briefs drop constraint if exists briefs_status_check;
alter table briefs add constraint briefs_status_check
  check (status in ('open', 'claimed', 'done', 'doc_review', 'published'));

alter table briefs
  add column published_at timestamptz,
  add column published_by text; -- who published: 'cli', 'api:<tokenId>', 'panel:<tokenId>'
