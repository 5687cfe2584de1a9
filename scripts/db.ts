// npm run db -- up | url | migrate | down | status
// Manages the embedded PostgreSQL under ECHODO_HOME; with DATABASE_URL set, nothing is started
// and up/url/migrate work against that database instead. `url` is the superuser's (for psql);
// the processes themselves log in as the app role (docs/security.md, "The database role").
// With DATABASE_APP_URL alone there is no superuser: `url` prints it, and up/migrate refuse.
import { loadConfigOrExit, maskedConfig } from '../core/config.ts';
import { errorMessage } from '../core/errors.ts';
import { connect, resolveDatabaseUrl } from '../store/connection.ts';
import { embeddedStatus, stopEmbeddedPostgres } from '../store/embedded.ts';
import { migrate } from '../store/migrate.ts';
import { exitOnStartupError } from './cli.ts';

exitOnStartupError('db');

const USAGE = 'usage: npm run db -- up | url | migrate | down | status';

async function migrateUrl(url: string): Promise<string[]> {
  const sql = connect(url, { max: 1 });
  try {
    return await migrate(sql);
  } finally {
    await sql.end({ timeout: 2 });
  }
}

function reportApplied(applied: string[]): void {
  process.stderr.write(applied.length ? `applied: ${applied.join(', ')}\n` : 'schema up to date\n');
}

async function main(args: string[]): Promise<number> {
  const command = args[0];
  if (args.length !== 1 || !['up', 'url', 'migrate', 'down', 'status'].includes(command!)) {
    process.stderr.write(`${USAGE}\n`);
    return 2;
  }
  const config = loadConfigOrExit();
  const external = Boolean(config.DATABASE_URL);
  const appOnly = Boolean(config.DATABASE_APP_URL) && !external;
  if (appOnly && (command === 'up' || command === 'migrate')) {
    process.stderr.write('db: only DATABASE_APP_URL is set, and that login cannot migrate: set DATABASE_URL to a superuser URL\n');
    return 2;
  }
  switch (command) {
    case 'url':
      if (appOnly) {
        process.stdout.write(`${config.DATABASE_APP_URL}\n`);
        return 0;
      }
      process.stdout.write(`${await resolveDatabaseUrl(config)}\n`);
      return 0;
    case 'up': {
      const url = await resolveDatabaseUrl(config);
      reportApplied(await migrateUrl(url));
      process.stdout.write(`${url}\n`);
      return 0;
    }
    case 'migrate': {
      const applied = await migrateUrl(await resolveDatabaseUrl(config));
      process.stdout.write(applied.length ? `applied: ${applied.join(', ')}\n` : 'schema up to date\n');
      return 0;
    }
    case 'down':
      if (external) {
        process.stdout.write('DATABASE_URL is set: no embedded server to stop\n');
        return 0;
      }
      process.stdout.write(
        (await stopEmbeddedPostgres(config.ECHODO_HOME))
          ? `stopped the embedded PostgreSQL under ${config.ECHODO_HOME}\n`
          : `no embedded PostgreSQL running under ${config.ECHODO_HOME}\n`,
      );
      return 0;
    case 'status': {
      if (external) {
        process.stdout.write(`external database: ${String(maskedConfig(config).DATABASE_URL)}\n`);
        return 0;
      }
      const status = await embeddedStatus(config.ECHODO_HOME);
      process.stdout.write(
        status.running
          ? `running under ${config.ECHODO_HOME}: pid ${status.pid}, port ${status.port}\n`
          : `not running (home ${config.ECHODO_HOME})\n`,
      );
      return 0;
    }
  }
  return 2;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`db: ${errorMessage(err)}\n`);
    process.exit(1);
  },
);
