// Harness definitions, in one place: what a run may touch and which tools it gets.
// A workspace may override or add harnesses (harness_providers) and route roles to them
// (role_harness_routes); a job without harnessAlias is routed by its roleId, else `code`.
import type { Config } from '../../core/config.ts';
import { EchodoError } from '../../core/errors.ts';
import type { Job } from '../../core/job.ts';
import { parseAllowedCommands } from '../tools/command-line.ts';
import { harnessAliasForRole, harnessOverride, type HarnessAdapter } from '../../store/settings-lookup.ts';
import type { WorkspaceTx } from '../../store/workspace.ts';

export interface Harness {
  alias: string;
  /** code: its own worktree and branch. doc-writer: works straight in WORKER_REPO_ROOT. */
  needsWorktree: boolean;
  /** null: no run_command tool at all. */
  allowedCommands: string[] | null;
  /** null: may write anywhere in its root. */
  writePrefixes: string[] | null;
  /** minimal: the worker's own model loop; otherwise a remote AG-UI agent (worker/adapters/). */
  adapter: HarnessAdapter;
  endpointUrl: string | null;
  keyEnvVar: string | null;
}

const MINIMAL = { adapter: 'minimal', endpointUrl: null, keyEnvVar: null } as const;

export function builtinHarnesses(config: Pick<Config, 'WORKER_ALLOWED_COMMANDS'>): Record<string, Harness> {
  const commands = parseAllowedCommands(config.WORKER_ALLOWED_COMMANDS);
  return {
    code: { alias: 'code', needsWorktree: true, allowedCommands: commands, writePrefixes: null, ...MINIMAL },
    'doc-writer': {
      alias: 'doc-writer',
      needsWorktree: false,
      allowedCommands: null,
      writePrefixes: ['docs/', 'plans/'],
      ...MINIMAL,
    },
  };
}

export async function resolveHarnessForJob(
  tx: WorkspaceTx,
  job: Job,
  config: Pick<Config, 'WORKER_ALLOWED_COMMANDS'>,
): Promise<Harness> {
  const alias = job.harnessAlias ?? (await harnessAliasForRole(tx, job.roleId)) ?? 'code';
  const override = await harnessOverride(tx, alias);
  if (override) {
    return {
      alias,
      needsWorktree: override.needs_worktree,
      // A row written before the rule (or by hand) still gets no run_command without a worktree.
      allowedCommands: override.needs_worktree && override.allowed_commands.length ? override.allowed_commands : null,
      writePrefixes: override.write_prefixes,
      adapter: override.adapter ?? 'minimal',
      endpointUrl: override.endpoint_url ?? null,
      keyEnvVar: override.key_env_var ?? null,
    };
  }
  const builtin = builtinHarnesses(config)[alias];
  if (!builtin)
    throw new EchodoError(
      'harness_unknown',
      `harness "${alias}" is neither built in (code, doc-writer) nor in harness_providers of workspace ${tx.workspaceId}`,
    );
  return builtin;
}
