// npm run mission-control                                   → the panel on 127.0.0.1:$MISSION_CONTROL_PORT
// npm run mission-control -- token create --workspace W     → a workspace token, printed once
// npm run mission-control -- token create --admin           → an admin (fleet) token, printed once
import { parseArgs } from 'node:util';
import { openDatabase } from '../store/connection.ts';
import { createAdminToken, createWorkspaceToken } from '../store/tokens.ts';
import { loadConfigOrExit } from '../worker/config.ts';
import { EchodoError, errorMessage } from '../worker/errors.ts';
import { createMissionControl } from './mission-control/server.ts';

const USAGE = 'usage: npm run mission-control [-- token create (--workspace W | --admin)]';

function usage(problem: string): never {
  process.stderr.write(`${problem}\n${USAGE}\n`);
  process.exit(2);
}

type Command = { kind: 'serve' } | { kind: 'token'; workspace?: string; admin: boolean };

function parseCommand(argv: string[]): Command {
  if (argv.length === 0) return { kind: 'serve' };
  if (argv[0] !== 'token' || argv[1] !== 'create') usage(`unknown command: ${argv.join(' ')}`);
  let values: { workspace?: string; admin?: boolean };
  try {
    ({ values } = parseArgs({
      args: argv.slice(2),
      options: { workspace: { type: 'string' }, admin: { type: 'boolean' } },
      strict: true,
      allowPositionals: false,
    }));
  } catch (err) {
    usage(errorMessage(err));
  }
  if (Boolean(values.workspace) === Boolean(values.admin)) usage('token create needs exactly one of --workspace W or --admin');
  return { kind: 'token', workspace: values.workspace, admin: values.admin ?? false };
}

async function main(): Promise<void> {
  const command = parseCommand(process.argv.slice(2));
  const config = loadConfigOrExit();
  const db = await openDatabase(config);

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
