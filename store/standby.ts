// The remote standby's one cross-workspace read (migrations 013 and 014, worker/remote/standby.ts).
import type { Sql } from 'postgres';

export interface StandbyRun {
  workspace_id: string;
  agent_run_id: string;
  branch: string;
  /** The run's latest checkpoint commit: on the checkpoint remote before its row was written. */
  commit_oid: string;
  status: 'running' | 'queued';
  /** Milliseconds until the lease expires (negative: expired); null when queued. */
  lease_left_ms: number | null;
}

/** Runs running or queued on a host other than `hostId`, with their latest checkpoint (at most 1,000). */
export async function runsOnOtherHosts(admin: Sql, hostId: string): Promise<StandbyRun[]> {
  return admin<StandbyRun[]>`select * from echodo_standby_runs(${hostId})`;
}
