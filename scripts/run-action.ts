// The shared shape of the operator's one-run commands (`cancel`, `retry`): --workspace W --run R,
// config and secrets registered before anything is logged, one JSON line on stdout, and the exit
// code from the error: 2 no such run in that workspace (or bad arguments), 3 refused, 1 otherwise.
import { loadConfigOrExit, type Config } from '../core/config.ts';
import { EchodoError, errorMessage } from '../core/errors.ts';
import { openDatabase, type Database } from '../store/connection.ts';
import { registerConfigSecrets, registerStartupSecrets } from '../worker/secrets.ts';
import { command, exitOnStartupError } from './cli.ts';
import { DATABASE_ENV } from './cli-env.ts';

export interface RunActionContext {
  config: Config;
  db: Database;
  workspaceId: string;
  agentRunId: string;
}

export interface RunActionSpec {
  name: string;
  summary: string;
  /** What exit 3 means for this command. */
  refused: string;
}

export async function runActionCommand(
  { name, summary, refused }: RunActionSpec,
  act: (ctx: RunActionContext) => Promise<unknown>,
): Promise<never> {
  const { values, fail } = command({
    name,
    summary,
    usage: ['-- --workspace W --run R'],
    flags: {
      workspace: { type: 'string', value: 'W', help: 'the workspace of the run' },
      run: { type: 'string', value: 'R', help: 'the run (agentRunId)' },
    },
    exitCodes: {
      0: 'done: one JSON line on stdout',
      1: 'any other error',
      2: 'bad arguments, or no such run in that workspace',
      3: refused,
    },
    env: [...DATABASE_ENV, 'REDIS_URL', 'WORKER_REPO_ROOT'],
  });
  if (!values.workspace || !values.run) fail('both --workspace and --run are required');
  exitOnStartupError(name);

  const config = loadConfigOrExit();
  registerConfigSecrets(config); // before anything is logged or stored
  const db = await openDatabase(config);
  await registerStartupSecrets(config, db);
  let code = 0;
  try {
    const answer = await act({ config, db, workspaceId: values.workspace!, agentRunId: values.run! });
    process.stdout.write(`${JSON.stringify(answer)}\n`);
  } catch (err) {
    process.stderr.write(`${name}: ${errorMessage(err)}\n`);
    const e = err instanceof EchodoError ? err.code : undefined;
    code = e === 'run_not_found' ? 2 : e === 'action_refused' ? 3 : 1;
  } finally {
    await db.close();
  }
  process.exit(code);
}
