-- A retention policy keeps each run's first checkpoint as well as its last ones, so a pruned
-- chain has a gap: seq 1 links to the chain's origin, the first row after the gap to anchor_hash.
-- A fork's origin (its source checkpoint's hash) used to be the anchor itself (anchor_seq 0),
-- which a prune overwrites; it gets a column of its own.
alter table checkpoint_anchors add column origin_hash text;
update checkpoint_anchors set origin_hash = anchor_hash where anchor_seq = 0;
