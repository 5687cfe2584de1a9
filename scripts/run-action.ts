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
  /** The command's own flags (spec.flags), as given. */
  values: Record<string, unknown>;
}

export interface RunActionSpec {
  name: string;
  summary: string;
  /** What exit 3 means for this command. */
  refused: string;
  /** Flags besides --workspace and --run, with their usage line. */
  flags?: Record<string, { type: 'string'; value: string; help: string }>;
  usage?: string;
  /** Checks the extra flags before anything is opened; a message is a usage error (exit 2). */
  check?: (values: Record<string, unknown>) => string | undefined;
}

export async function runActionCommand(
  { name, summary, refused, flags, usage, check }: RunActionSpec,
  act: (ctx: RunActionContext) => Promise<unknown>,
): Promise<never> {
  const { values, fail } = command({
    name,
    summary,
    usage: [usage ?? '-- --workspace W --run R'],
    flags: {
      workspace: { type: 'string', value: 'W', help: 'the workspace of the run' },
      run: { type: 'string', value: 'R', help: 'the run (agentRunId)' },
      ...flags,
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
  const problem = check?.(values);
  if (problem) fail(problem);
  exitOnStartupError(name);

  const config = loadConfigOrExit();
  registerConfigSecrets(config); // before anything is logged or stored
  const db = await openDatabase(config);
  await registerStartupSecrets(config, db);
  let code = 0;
  try {
    const answer = await act({ config, db, workspaceId: values.workspace!, agentRunId: values.run!, values });
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
