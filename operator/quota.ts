// A workspace over its storage quota takes no new runs: the refusal names the bytes measured,
// the quota, and the way out. Re-dispatches of existing runs still go (they add no new run).
import { EchodoError } from '../core/errors.ts';
import { overQuota } from '../store/storage.ts';
import type { WorkspaceTx } from '../store/workspace.ts';

export async function refuseOverQuota(tx: WorkspaceTx): Promise<void> {
  const over = await overQuota(tx);
  if (!over) return;
  throw new EchodoError(
    'action_refused',
    `workspace ${tx.workspaceId} is over its storage quota (${over.usedBytes} of ${over.quotaBytes} bytes): ` +
      'new runs are refused until a prune brings it under (retention set, or npm run prune), or the quota is raised',
  );
}
