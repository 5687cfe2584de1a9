// Once a daemon is running, a stray error must not take it down. postgres.js 3.4.9 has known
// bugs on connections killed mid-flight (a TypeError in its socket write path, an unhandled
// rejection from its start-up type query): those are logged and the daemon goes on, since the
// connection is gone and the pool makes a new one. Anything else is a bug of ours: exit 1.
import type { Logger } from './log.ts';

function fromDriver(err: unknown): boolean {
  const stack = err instanceof Error ? (err.stack ?? '') : '';
  const code = (err as { code?: unknown })?.code;
  return stack.includes('/node_modules/postgres/') || (typeof code === 'string' && /^(57P0|08|CONNECTION_)/.test(code));
}

export function guardDaemon(name: string, log: Logger): void {
  process.removeAllListeners('uncaughtException');
  process.removeAllListeners('unhandledRejection');
  process.on('unhandledRejection', (err) => {
    log.error(
      { error: err instanceof Error ? err.message : String(err) },
      `${name}: unhandled rejection ignored; the daemon goes on`,
    );
  });
  process.on('uncaughtException', (err) => {
    if (fromDriver(err)) {
      log.error({ error: err.message }, `${name}: database driver fault on a dead connection; the daemon goes on`);
      return;
    }
    log.fatal({ error: err.message, stack: err.stack }, `${name}: uncaught exception`);
    process.exit(1);
  });
}
