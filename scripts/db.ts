// npm run db: the embedded PostgreSQL (its description below is its --help).
// Manages the embedded PostgreSQL under ECHODO_HOME; with DATABASE_URL set, nothing is started
// and up/url/migrate work against that database instead. `url` is the superuser's (for psql);
// the processes themselves log in as the app role (docs/security.md, "The database role").
// With DATABASE_APP_URL alone there is no superuser: `url` prints it, and up/migrate refuse.
import { loadConfigOrExit, maskedConfig } from '../core/config.ts';
import { errorMessage } from '../core/errors.ts';
import { connect, resolveDatabaseUrl } from '../store/connection.ts';
import { embeddedStatus, stopEmbeddedPostgres } from '../store/embedded.ts';
import { migrate } from '../store/migrate.ts';
import { command, exitOnStartupError } from './cli.ts';

const VERBS = ['up', 'url', 'migrate', 'down', 'status'];
const { positionals, fail } = command({
  name: 'db',
  summary:
    'manages the embedded PostgreSQL under ECHODO_HOME; with DATABASE_URL set nothing is started and up, url ' +
    'and migrate work against that database instead.',
  usage: ['-- up | url | migrate | down | status'],
  flags: {},
  positionals: {
    min: 1,
    max: 1,
    help: [
      'up       start the embedded server (if needed), migrate, print its URL',
      'url      print a superuser connection string usable by psql (DATABASE_APP_URL alone: that one)',
      'migrate  apply the pending migrations',
      'down     stop the embedded server',
      'status   whether the embedded server runs (pid, port), or which external database is set',
    ],
  },
  exitCodes: {
    0: 'done',
    1: 'an error (e.g. the server did not start)',
    2: 'bad arguments, or up/migrate with only DATABASE_APP_URL',
  },
  env: ['DATABASE_URL', 'DATABASE_APP_URL', 'ECHODO_HOME'],
});
if (!VERBS.includes(positionals[0]!)) fail(`unknown command: ${positionals[0]}`);
exitOnStartupError('db');

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
  const verb = args[0];
  const config = loadConfigOrExit();
  const external = Boolean(config.DATABASE_URL);
  const appOnly = Boolean(config.DATABASE_APP_URL) && !external;
  if (appOnly && (verb === 'up' || verb === 'migrate')) {
    process.stderr.write(
      'db: only DATABASE_APP_URL is set, and that login cannot migrate: set DATABASE_URL to a superuser URL\n',
    );
    return 2;
  }
  switch (verb) {
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

main(positionals).then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`db: ${errorMessage(err)}\n`);
    process.exit(1);
  },
);
