// How a process that serves or inspects runs sets up its tree processes: sandboxed whenever
// bubblewrap is usable. Without it (WORKER_SANDBOX=off, or bwrap unusable) the tree processes still
// hold no secret, but run as this user with the host's files in view: the start-up log says so.
import { rgPath as bundledRgPath } from '@vscode/ripgrep';
import type { Config } from '../../core/config.ts';
import { sandboxFor, sandboxOptionsFromConfig, type CommandSandbox } from '../sandbox/index.ts';
import { confineTrees } from './registry.ts';

/** Confines the trees of this process; returns the line for the start-up log. */
export async function setUpTrees(config: Config, probed?: CommandSandbox): Promise<string> {
  const sandbox = probed ?? (await sandboxFor(sandboxOptionsFromConfig(config)));
  if (sandbox.mode === 'bwrap' && sandbox.usable) {
    confineTrees({
      sandbox: { bwrap: sandbox.bwrap, toolchain: sandbox.toolchain, rgPath: bundledRgPath },
      bases: [config.WORKER_WORKTREE_BASE],
    });
    return "tree processes: bwrap sandbox, one per run, no secret, no network, that run's tree only";
  }
  return 'tree processes: NOT sandboxed (bubblewrap off or unusable): they hold no secret but see the host as this user';
}
