// npm run mission-control                                   → the panel on 127.0.0.1:$MISSION_CONTROL_PORT
// npm run mission-control -- token create --workspace W     → a workspace token, printed once
// npm run mission-control -- token create --admin           → an admin (fleet) token, printed once
import { openDatabase } from '../store/connection.ts';
import { createAdminToken, createWorkspaceToken } from '../store/tokens.ts';
import { loadConfigOrExit } from '../worker/config.ts';
import { EchodoError, errorMessage } from '../worker/errors.ts';
import { registerConfigSecrets, registerStartupSecrets } from '../worker/secrets.ts';
import { exitOnStartupError, parseCli, usageError } from './cli.ts';
import { createMissionControl } from './mission-control/server.ts';

exitOnStartupError('mission-control');

const USAGE = 'npm run mission-control [-- token create (--workspace W | --admin)]';

type Command = { kind: 'serve' } | { kind: 'token'; workspace?: string; admin: boolean };

function parseCommand(): Command {
  const { values, positionals } = parseCli({ workspace: { type: 'string' }, admin: { type: 'boolean' } }, USAGE);
  if (positionals.length === 0 && !values.workspace && !values.admin) return { kind: 'serve' };
  if (positionals.join(' ') !== 'token create') usageError(USAGE, `unknown command: ${process.argv.slice(2).join(' ')}`);
  if (Boolean(values.workspace) === Boolean(values.admin)) usageError(USAGE, 'token create needs exactly one of --workspace W or --admin');
  return { kind: 'token', workspace: values.workspace, admin: values.admin ?? false };
}

async function main(): Promise<void> {
  const command = parseCommand();
  const config = loadConfigOrExit();
  registerConfigSecrets(config);
  const db = await openDatabase(config);
  // Operator actions write events and reasons; the panel logs: both go through the redactor.
  await registerStartupSecrets(config, db);

  if (command.kind === 'token') {
    try {
      const token = command.admin ? await createAdminToken(db.admin) : await createWorkspaceToken(db.app, command.workspace!);
      process.stdout.write(`${token}\n`);
      process.stderr.write(`${command.admin ? 'admin token' : `token for workspace ${command.workspace}`}: shown once, stored only as its sha256\n`);
    } catch (err) {
      if (err instanceof EchodoError && err.code === 'workspace_not_found') {
        process.stderr.write(`${err.message}\n`);
        process.exitCode = 2;
      } else throw err;
    } finally {
      await db.close();
    }
    return;
  }

  const running = await createMissionControl({ db, config }).start();
  process.stderr.write(`mission control on ${running.url}\n`);
  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    await running.close();
    await db.close();
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main().catch((err) => {
  process.stderr.write(`mission-control: ${errorMessage(err)}\n`);
  process.exit(1);
});
