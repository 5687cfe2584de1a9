// Typed errors. Each names the problem; `cause` keeps the underlying error.
// Unknown throws are coerced once, at the boundary, with toEchodoError.

export type ErrorCode =
  | 'invalid_job'
  | 'workspace_not_found'
  | 'run_not_found'
  | 'action_refused' // an operator action (cancel, retry, fork) that the run's state does not allow
  | 'lease_lost'
  | 'harness_unknown'
  | 'model_unknown'
  | 'repo_invalid'
  | 'ref_refused' // a baseRef or branch that belongs to another run or workspace
  | 'worktree_unrecoverable'
  | 'tool_refused'
  | 'tree_refused' // the tree process refused a path (a symlinked folder, a folder for a file…)
  | 'tree_process_gone'
  | 'unsupported_path' // a file name the checkpoint cannot record faithfully
  | 'io_failure'
  | 'schema_too_new'
  | 'transient'
  | 'remote_agent' // a remote AG-UI agent failed, misbehaved or did not answer in time
  | 'internal';

export class EchodoError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'EchodoError';
  }
}

/** The run's lease was taken over (its epoch moved on) or this worker lost contact for longer than its lease. */
export class LeaseLostError extends EchodoError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('lease_lost', message, options);
    this.name = 'LeaseLostError';
  }
}

/** Which confinement rule refused a tool call (a bounded set: a metrics label). */
export type ConfinementRule = 'command' | 'path' | 'revision' | 'sandbox';

/**
 * A tool call the harness refuses: reported to the model as a tool error, the run goes on. `rule`:
 * the confinement refused it (not, say, a file that does not exist).
 */
export class ToolRefusedError extends EchodoError {
  constructor(
    message: string,
    readonly rule?: ConfinementRule,
  ) {
    super('tool_refused', message);
    this.name = 'ToolRefusedError';
  }
}

export function toEchodoError(err: unknown): EchodoError {
  if (err instanceof EchodoError) return err;
  if (err instanceof Error) return new EchodoError('internal', err.message, { cause: err });
  return new EchodoError('internal', String(err));
}

export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** The error and its causes, a few deep (a refused connection is in the cause of a fetch failure). */
export function errorWithCauses(err: unknown): string {
  const parts = [errorMessage(err)];
  let cause = (err as { cause?: unknown }).cause;
  for (let i = 0; cause && i < 3; i++) {
    parts.push(errorMessage(cause));
    cause = (cause as { cause?: unknown }).cause;
  }
  return parts.join(': ');
}
