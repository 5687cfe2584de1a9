// What every agent tool receives: where it may act, and the lead's hooks around acting.
// Tools are pure functions over this context; the lead wraps them into ai-SDK tools.
import type { z } from 'zod';
import type { CommandSandbox } from '../sandbox/index.ts';

export interface ToolContext {
  /** Absolute, realpath'd worktree (code harness) or repo root (doc-writer). */
  root: string;
  /** null: writes anywhere under root; doc-writer: ['docs/', 'plans/']. */
  writePrefixes: string[] | null;
  /**
   * 'tracked' (doc-writer, which works in the repo root): reads only files git tracks, plus the
   * write prefixes, so nothing the repo ignores (ECHODO_HOME's `.echodo/`, build output) is readable.
   */
  readScope?: 'all' | 'tracked';
  /** The harness's name, for refusals the model reads ("not on the allowlist of harness code"). */
  harnessAlias?: string;
  /** null: run_command is not available at all; else allowlisted command prefixes such as 'git diff'. */
  allowedCommands: string[] | null;
  commandTimeoutMs: number;
  /** How run_command is confined (worker/sandbox); absent means run_command is refused (fail closed). */
  sandbox?: CommandSandbox;
  /** The commit the run's branch started from: run_command's git arguments may name only it, HEAD and their ancestors. */
  baseOid?: string | null;
  /** Called before anything touches the tree (the lead's lease/fencing check); throws to refuse. */
  beforeTouch(): Promise<void>;
  /** Tells the lead which root-relative paths a tool changed (write_file: its path). */
  onTouched(paths: string[]): void;
  signal?: AbortSignal;
}

/** One tool: its name as the model sees it, a description, its zod input schema and what it does. */
export interface ToolDefinition<Schema extends z.ZodType = z.ZodType, Result = unknown> {
  name: string;
  description: string;
  inputSchema: Schema;
  execute(ctx: ToolContext, input: z.infer<Schema>): Promise<Result>;
}
