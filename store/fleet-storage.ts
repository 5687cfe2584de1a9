// The admin's storage view across the fleet: what the tables take on disk (rows, indexes and
// TOAST, every workspace together) and, per workspace, its checkpoint rows and what the storage
// sweep last measured against its quota. Read through echodo_fleet_storage() (021_fleet_storage.sql).
import type { Sql } from 'postgres';

export interface FleetStorage {
  /** Bytes on disk per table, indexes included, and their sum. */
  disk: { checkpoints: number; events: number; runs: number; total: number };
  workspaces: {
    workspaceId: string;
    checkpointRows: number;
    usedBytes: number | null;
    quotaBytes: number | null;
    measuredAt: Date | null;
  }[];
}

const num = (v: unknown) => (v === null || v === undefined ? null : Number(v));

export async function fleetStorage(admin: Sql): Promise<FleetStorage> {
  const [disk] = await admin`
    select pg_total_relation_size('worker_checkpoints')::bigint as checkpoints,
           pg_total_relation_size('convoy_events')::bigint as events,
           pg_total_relation_size('agent_runs')::bigint as runs`;
  const rows = await admin`select * from echodo_fleet_storage()`;
  const [checkpoints, events, runs] = [Number(disk!.checkpoints), Number(disk!.events), Number(disk!.runs)];
  return {
    disk: { checkpoints, events, runs, total: checkpoints + events + runs },
    workspaces: rows.map((r) => ({
      workspaceId: r.workspace_id,
      checkpointRows: Number(r.checkpoint_rows),
      usedBytes: num(r.used_bytes),
      quotaBytes: num(r.quota_bytes),
      measuredAt: r.measured_at ?? null,
    })),
  };
}
