// run_command: one allowlisted program, no shell, in the root, inside the bubblewrap sandbox
// (worker/sandbox: no network, no host files but the toolchain and the worktree, an environment of
// PATH/HOME/LANG/CI only, limits), a timeout that kills the whole sandbox, and output capped to its
// tail. With WORKER_SANDBOX=off the program runs directly with an environment built from scratch.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { z } from 'zod';
import { ToolRefusedError } from '../../core/errors.ts';
import { faultPoint } from '../faults.ts';
import { describeSandbox, sandboxedCommand, type CommandSandbox } from '../sandbox/index.ts';
import { checkAllowed, splitCommand } from './command-line.ts';
import { vetGitRevisions } from './git-revisions.ts';
import type { ToolContext, ToolDefinition } from './context.ts';
import { OutputTail } from './output-tail.ts';

export const COMMAND_OUTPUT_CAP_BYTES = 64 * 1024;
// After the program exits, how long its stdout/stderr may stay open (held by a process that left
// the group) before we stop waiting for them.
const EXIT_GRACE_MS = 2000;

export const runCommandInput = z.object({
  command: z
    .string()
    .describe(
      'One command line, e.g. "pnpm test" or "git diff --stat". Run without a shell: no pipes, ;, &&, $() or redirects.',
    ),
});
export type RunCommandInput = z.infer<typeof runCommandInput>;

export interface RunCommandResult {
  command: string;
  /** null when the program was killed by a signal. */
  exitCode: number | null;
  signal?: string;
  timedOut?: boolean;
  stdout: string;
  stderr: string;
  truncated?: boolean;
  /** A command may change files; the lead finds out which with git. */
  mayHaveChangedFiles: true;
  note?: string;
}

/** The whole environment a command sees. Nothing else of the worker's environment is passed on. */
export function commandEnvironment(home: string, parentPath = process.env.PATH ?? ''): Record<string, string> {
  // Only absolute PATH entries: a relative one ('.', '') would run a program planted in the worktree.
  const safePath = parentPath
    .split(path.delimiter)
    .filter((dir) => path.isAbsolute(dir))
    .join(path.delimiter);
  return {
    PATH: safePath || '/usr/local/bin:/usr/bin:/bin',
    HOME: home,
    LANG: 'C.UTF-8',
    TERM: 'dumb',
    GIT_TERMINAL_PROMPT: '0',
    GIT_CONFIG_NOSYSTEM: '1',
  };
}

export async function runCommand(ctx: ToolContext, input: RunCommandInput): Promise<RunCommandResult> {
  const argv = splitCommand(input.command);
  const entry = checkAllowed(argv, ctx.allowedCommands, ctx.harnessAlias);
  // Revisions named in git arguments must be of this run's own history (git-revisions.ts).
  if (argv[0] === 'git')
    await vetGitRevisions({ root: ctx.root, baseOid: ctx.baseOid ?? null }, argv.slice(entry.split(' ').length));
  const sandbox = ctx.sandbox;
  if (!sandbox) throw new ToolRefusedError('run_command is refused: no sandbox is configured for this run', 'sandbox');
  if (sandbox.mode === 'bwrap' && !sandbox.usable)
    throw new ToolRefusedError(`run_command is refused: ${sandbox.reason}`, 'sandbox');
  await ctx.beforeTouch();
  ctx.signal?.throwIfAborted();
  if (sandbox.mode === 'bwrap') {
    if (!findProgram(argv[0]!, sandbox.toolchain.path))
      throw new ToolRefusedError(`program ${JSON.stringify(argv[0])} was not found on PATH`);
    const spec = await sandboxedCommand(sandbox, { root: ctx.root, argv });
    try {
      const result = await execute(
        ctx,
        { file: spec.file, args: spec.args, cwd: '/', env: spec.env, onKill: () => spec.cgroup?.kill() },
        argv,
        input.command,
      );
      return withSandboxNote(result, sandbox);
    } finally {
      await spec.cgroup?.remove();
    }
  }
  // WORKER_SANDBOX=off: a fresh, empty HOME per command: no user git config, npm tokens or caches
  // of the worker's user; otherwise the worker's own privileges (docs/security.md).
  const home = await mkdtemp(path.join(os.tmpdir(), 'echodo-cmd-home-'));
  try {
    const spawnSpec = { file: argv[0]!, args: argv.slice(1), cwd: ctx.root, env: commandEnvironment(home) };
    return await execute(ctx, spawnSpec, argv, input.command);
  } finally {
    await rm(home, { recursive: true, force: true });
  }
}

function findProgram(name: string, searchPath: string): boolean {
  if (name.includes('/')) return false;
  return searchPath.split(path.delimiter).some((dir) => existsSync(path.join(dir, name)));
}

// bwrap reports a command killed by a signal as exit code 128 + the signal number.
const LIMIT_SIGNALS: Record<number, string> = {
  9: 'SIGKILL (the memory limit, or the whole sandbox killed)',
  24: 'SIGXCPU: it reached the CPU time limit',
  25: 'SIGXFSZ: a file reached the file size limit',
};

function withSandboxNote(
  result: RunCommandResult,
  sandbox: Extract<CommandSandbox, { usable: true }>,
): RunCommandResult {
  const notes = result.note ? [result.note] : [];
  const signal = result.exitCode !== null && result.exitCode > 128 ? LIMIT_SIGNALS[result.exitCode - 128] : undefined;
  if (signal) notes.push(`the command was killed by ${signal}`);
  notes.push(`ran in the ${describeSandbox(sandbox)}`);
  return { ...result, note: notes.join('; ') };
}

interface SpawnSpec {
  file: string;
  args: string[];
  cwd: string;
  env: Record<string, string>;
  /** Kills what the process group kill cannot reach (the sandbox's cgroup). */
  onKill?: () => void;
}

function execute(ctx: ToolContext, spec: SpawnSpec, argv: string[], command: string): Promise<RunCommandResult> {
  return new Promise((resolve, reject) => {
    // detached: the command leads its own process group, so a timeout kills its children too.
    const child = spawn(spec.file, spec.args, {
      cwd: spec.cwd,
      env: spec.env,
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    faultPoint('during-command');

    const stdout = new OutputTail(COMMAND_OUTPUT_CAP_BYTES);
    const stderr = new OutputTail(COMMAND_OUTPUT_CAP_BYTES);
    child.stdout.on('data', (chunk: Buffer) => stdout.push(chunk));
    child.stderr.on('data', (chunk: Buffer) => stderr.push(chunk));

    let timedOut = false;
    let aborted = false;
    let exit: { code: number | null; signal: NodeJS.Signals | null } | null = null;
    let settled = false;
    let graceTimer: NodeJS.Timeout | undefined;

    const killGroup = () => {
      if (child.pid === undefined) return;
      try {
        process.kill(-child.pid, 'SIGKILL');
      } catch {
        // the group is already gone
      }
      spec.onKill?.();
    };
    const timer = setTimeout(() => {
      timedOut = true;
      killGroup();
    }, ctx.commandTimeoutMs);
    const onAbort = () => {
      aborted = true;
      killGroup();
    };
    ctx.signal?.addEventListener('abort', onAbort, { once: true });

    const cleanup = () => {
      settled = true;
      clearTimeout(timer);
      clearTimeout(graceTimer);
      ctx.signal?.removeEventListener('abort', onAbort);
    };

    child.on('error', (err: NodeJS.ErrnoException) => {
      if (settled) return;
      cleanup();
      if (err.code === 'ENOENT')
        reject(new ToolRefusedError(`program ${JSON.stringify(argv[0])} was not found on PATH`));
      else reject(err);
    });
    child.on('exit', (code, signal) => {
      exit = { code, signal };
      // Stragglers the command left in its group would keep the pipes open; they go with it.
      killGroup();
      graceTimer = setTimeout(() => {
        child.stdout.destroy();
        child.stderr.destroy();
        finish();
      }, EXIT_GRACE_MS);
    });
    child.on('close', () => finish());

    function finish() {
      if (settled || exit === null) return;
      cleanup();
      const notes: string[] = [];
      if (timedOut) notes.push(`command timed out after ${ctx.commandTimeoutMs} ms and was killed (SIGKILL)`);
      if (aborted) notes.push('command was stopped because the run was cancelled');
      if (stdout.truncated) notes.push(`stdout was longer than ${COMMAND_OUTPUT_CAP_BYTES} bytes; showing its end`);
      if (stderr.truncated) notes.push(`stderr was longer than ${COMMAND_OUTPUT_CAP_BYTES} bytes; showing its end`);
      const result: RunCommandResult = {
        command,
        exitCode: exit.code,
        stdout: stdout.text(),
        stderr: stderr.text(),
        mayHaveChangedFiles: true,
      };
      if (exit.signal) result.signal = exit.signal;
      if (timedOut) result.timedOut = true;
      if (stdout.truncated || stderr.truncated) result.truncated = true;
      if (notes.length > 0) result.note = notes.join('; ');
      resolve(result);
    }
  });
}

export const runCommandTool: ToolDefinition<typeof runCommandInput, RunCommandResult> = {
  name: 'run_command',
  description:
    'Run one allowlisted command (such as "pnpm test", "pnpm lint", "git status", "git diff --stat") in the worktree, ' +
    'without a shell. Returns the exit code and the end of stdout/stderr; a non-zero exit is a normal result.',
  inputSchema: runCommandInput,
  execute: (ctx, input) => runCommand(ctx, input),
};
