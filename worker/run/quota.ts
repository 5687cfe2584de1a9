// The storage quota, wherever a run starts: dispatch and Retry (operator/dispatch.ts), fork
// (operator/fork.ts), and a job taken from either queue (claim.ts), however it got there. A
// workspace whose last measure (the storage sweep's: Postgres and git) is over its quota starts
// no run: not a new one, not a re-dispatch, not the first claim of one queued before it went
// over. A run already under way goes on: a release or a stall's re-dispatch is not a start.
import { EchodoError } from '../../core/errors.ts';
import { overQuota, type OverQuota } from '../../store/storage.ts';
import type { WorkspaceTx } from '../../store/workspace.ts';
import type { Admission } from './admission.ts';

/** The refusal, naming the quota, the bytes measured and the way out. */
export function quotaReason(workspaceId: string, over: OverQuota): string {
  const git = over.gitBytes === null ? '' : ` (${over.usedBytes - over.gitBytes} in Postgres, ${over.gitBytes} in git)`;
  return (
    `workspace ${workspaceId} is over its storage quota: ${over.usedBytes} bytes used${git} of ${over.quotaBytes} ` +
    'allowed; no run starts until a prune brings it under (retention set, Prune now or npm run prune) ' +
    'or the quota is raised (quota set)'
  );
}

/** The reason the workspace starts no run now; undefined when it is under its quota (or has none). */
export async function quotaRefusal(tx: WorkspaceTx): Promise<string | undefined> {
  const over = await overQuota(tx);
  return over && quotaReason(tx.workspaceId, over);
}

/** Throws `action_refused` (dispatch and retry exit 3, the panel answers 409) when over the quota. */
export async function refuseOverQuota(tx: WorkspaceTx): Promise<void> {
  const reason = await quotaRefusal(tx);
  if (reason) throw new EchodoError('action_refused', reason);
}

/** Does this admission start a run: a new one, a re-dispatch, or the first claim of a run never held? */
export function startsRun(admission: Admission): boolean {
  if (admission.outcome === 'recorded' || admission.outcome === 'redispatched') return true;
  return admission.outcome === 'served' && admission.state === 'queued';
}
