// Self-supervision for the daemons (worker, stall detector, mission control): run in a terminal or a
// container without a restart policy, the process becomes a small parent that runs the same script
// as its child and starts it again after a crash or an exit that asks for a fresh process (a lost
// lease). Deployments that supervise themselves (systemd, Kubernetes) turn it off with
// ECHODO_SUPERVISE=0, and the script is then the daemon itself.
import { spawn, type ChildProcess } from 'node:child_process';
import type { Logger } from 'pino';

/** Set in the child's environment: it is supervised, so it must not supervise in turn. */
export const SUPERVISED_CHILD_ENV = 'ECHODO_SUPERVISED_BY';

/** Exit codes after which a restart cannot help: a clean stop, a usage or configuration error. */
const FINAL_EXIT_CODES = new Set([0, 2]);

export interface BackoffPolicy {
  firstMs: number;
  maxMs: number;
  /** A child that ran this long was healthy: the next restart starts from firstMs again. */
  stableMs: number;
}

export const DEFAULT_BACKOFF: BackoffPolicy = { firstMs: 500, maxMs: 10_000, stableMs: 30_000 };

/** The delay before restart number `restarts` (1-based) in a row. */
export function restartDelayMs(restarts: number, policy: BackoffPolicy = DEFAULT_BACKOFF): number {
  return Math.min(policy.maxMs, policy.firstMs * 2 ** Math.max(0, restarts - 1));
}

export function isSupervisedChild(env: NodeJS.ProcessEnv = process.env): boolean {
  return Boolean(env[SUPERVISED_CHILD_ENV]);
}

/**
 * In a supervised child: returns at once, and stops this process (as SIGTERM does) should the
 * parent die, so a killed parent leaves no orphan daemon behind.
 * Supervision off: returns at once. Otherwise: this process becomes the parent and never returns.
 */
export async function superviseUnlessChild(options: { name: string; enabled: boolean; log: Logger }): Promise<void> {
  if (isSupervisedChild()) {
    watchParent();
    return;
  }
  if (!options.enabled) return;
  await supervise(options);
}

function watchParent(): void {
  if (!process.channel) return;
  process.channel.unref(); // the channel must not keep a finished daemon alive
  process.once('disconnect', () => process.kill(process.pid, 'SIGTERM'));
}

async function supervise({ name, log }: { name: string; log: Logger }): Promise<never> {
  let child: ChildProcess | undefined;
  let stopping: NodeJS.Signals | undefined;
  let restarts = 0;
  let wakeUp: (() => void) | undefined;

  const onSignal = (signal: NodeJS.Signals) => {
    stopping ??= signal;
    if (child && child.exitCode === null && child.signalCode === null) {
      log.info({ childPid: child.pid, signal }, `${name}: passing ${signal} to the child`);
      child.kill(signal);
    } else {
      wakeUp?.(); // waiting to restart: nothing to stop
    }
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);

  for (;;) {
    const startedAt = performance.now();
    child = spawn(process.execPath, [...process.execArgv, ...process.argv.slice(1)], {
      stdio: ['inherit', 'inherit', 'inherit', 'ipc'],
      env: { ...process.env, [SUPERVISED_CHILD_ENV]: String(process.pid) },
    });
    log.info({ childPid: child.pid, restarts }, `${name}: supervisor started its child`);
    const exit = await new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
      child!.once('exit', (code, signal) => resolve({ code, signal }));
      child!.once('error', () => resolve({ code: 1, signal: null }));
    });
    const code = exit.code ?? 1;
    if (stopping) {
      log.info({ childPid: child.pid, ...exit }, `${name}: child stopped; supervisor exits`);
      process.exit(code);
    }
    if (exit.signal === null && FINAL_EXIT_CODES.has(code)) {
      log.info({ childPid: child.pid, code }, `${name}: child exited with ${code}; not restarting`);
      process.exit(code);
    }
    if (performance.now() - startedAt >= DEFAULT_BACKOFF.stableMs) restarts = 0;
    restarts++;
    const delayMs = restartDelayMs(restarts);
    log.warn({ childPid: child.pid, ...exit, restarts, delayMs }, `${name}: child exited; restarting it`);
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, delayMs);
      wakeUp = () => {
        clearTimeout(timer);
        resolve();
      };
    });
    wakeUp = undefined;
    if (stopping) {
      log.info({ signal: stopping }, `${name}: stopped while waiting to restart; supervisor exits`);
      process.exit(0);
    }
  }
}
