// Real child processes for tests: `node --import tsx <script>` with its output captured line
// by line, waiting for a line, sending signals, waiting for exit.
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { PROJECT_ROOT } from '../../core/config.ts';

// Resolved once, so a child whose cwd is some temp repo still finds tsx.
const TSX_LOADER = import.meta.resolve('tsx');

export interface ChildExit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface Child {
  process: ChildProcess;
  pid: number;
  /** Every line printed so far, stdout and stderr interleaved as they arrived. */
  lines: string[];
  stdout: string[];
  stderr: string[];
  /** Resolves with the first line (already printed or still to come) that matches. */
  waitForLine(pattern: RegExp, options?: { timeoutMs?: number }): Promise<string>;
  kill(signal?: NodeJS.Signals): void;
  /** Resolves when the process has exited (at once if it already has). */
  exited: Promise<ChildExit>;
  /** Kills with `signal` and waits for exit; after graceMs sends SIGKILL. */
  stop(signal?: NodeJS.Signals, graceMs?: number): Promise<ChildExit>;
  output(): string;
}

export interface SpawnOptions {
  env?: Record<string, string | undefined>;
  cwd?: string;
  /** Passed through to the child's stdout/stderr as well (debugging). */
  echo?: boolean;
}

/**
 * Spawns `node --import tsx <script> ...args`; a relative script is taken from the project root.
 * A daemon runs without its supervising parent (ECHODO_SUPERVISE=0) unless the test sets it: tests
 * signal and watch the daemon's own process.
 */
export function spawnNode(script: string, args: string[] = [], options: SpawnOptions = {}): Child {
  const scriptPath = path.isAbsolute(script) ? script : path.join(PROJECT_ROOT, script);
  const env = { ECHODO_SUPERVISE: '0', ...options.env };
  return spawnProcess(process.execPath, ['--import', TSX_LOADER, scriptPath, ...args], { ...options, env });
}

/** Spawns any command with the same capture helpers. */
export function spawnProcess(command: string, args: string[], options: SpawnOptions = {}): Child {
  const child = spawn(command, args, {
    cwd: options.cwd ?? PROJECT_ROOT,
    env: { ...process.env, ...options.env } as NodeJS.ProcessEnv,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: string[] = [];
  const stdout: string[] = [];
  const stderr: string[] = [];
  const waiters = new Set<{ pattern: RegExp; resolve: (line: string) => void }>();

  const onLine = (line: string, into: string[]) => {
    lines.push(line);
    into.push(line);
    for (const waiter of waiters) {
      if (waiter.pattern.test(line)) {
        waiters.delete(waiter);
        waiter.resolve(line);
      }
    }
  };
  const splitLines = (stream: NodeJS.ReadableStream, into: string[], echoTo: NodeJS.WriteStream) => {
    let buffered = '';
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => {
      if (options.echo) echoTo.write(chunk);
      buffered += chunk;
      let newline: number;
      while ((newline = buffered.indexOf('\n')) >= 0) {
        onLine(buffered.slice(0, newline), into);
        buffered = buffered.slice(newline + 1);
      }
    });
    stream.on('end', () => {
      if (buffered) onLine(buffered, into);
      buffered = '';
    });
  };
  splitLines(child.stdout!, stdout, process.stdout);
  splitLines(child.stderr!, stderr, process.stderr);

  const exited = new Promise<ChildExit>((resolve) => {
    child.on('close', (code, signal) => resolve({ code, signal }));
    child.on('error', () => resolve({ code: null, signal: null }));
  });
  let hasExited = false;
  void exited.then(() => (hasExited = true));

  const output = () => lines.join('\n');

  return {
    process: child,
    pid: child.pid ?? -1,
    lines,
    stdout,
    stderr,
    exited,
    output,
    waitForLine(pattern, { timeoutMs = 30_000 } = {}) {
      const seen = lines.find((line) => pattern.test(line));
      if (seen !== undefined) return Promise.resolve(seen);
      return new Promise<string>((resolve, reject) => {
        const waiter = {
          pattern,
          resolve: (line: string) => {
            clearTimeout(timer);
            resolve(line);
          },
        };
        const timer = setTimeout(() => {
          waiters.delete(waiter);
          reject(new Error(`no line matching ${pattern} within ${timeoutMs} ms; output so far:\n${output()}`));
        }, timeoutMs);
        waiters.add(waiter);
        void exited.then(({ code, signal }) => {
          if (!waiters.delete(waiter)) return;
          clearTimeout(timer);
          reject(
            new Error(
              `process exited (code ${code}, signal ${signal}) before a line matched ${pattern}; output:\n${output()}`,
            ),
          );
        });
      });
    },
    kill(signal = 'SIGTERM') {
      if (!hasExited) child.kill(signal);
    },
    async stop(signal = 'SIGTERM', graceMs = 10_000) {
      if (!hasExited) child.kill(signal);
      const timer = setTimeout(() => {
        if (!hasExited) child.kill('SIGKILL');
      }, graceMs);
      try {
        return await exited;
      } finally {
        clearTimeout(timer);
      }
    },
  };
}

/** Polls `predicate` until it returns a truthy value, which is returned. */
export async function waitFor<T>(
  predicate: () => T | Promise<T>,
  {
    timeoutMs = 10_000,
    intervalMs = 50,
    what = 'condition',
  }: { timeoutMs?: number; intervalMs?: number; what?: string } = {},
): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const value = await predicate();
      if (value) return value as NonNullable<T>;
    } catch (err) {
      lastError = err; // e.g. a table not there yet: keep polling
    }
    if (Date.now() > deadline) {
      const detail = lastError instanceof Error ? ` (last error: ${lastError.message})` : '';
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${detail}`);
    }
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}
