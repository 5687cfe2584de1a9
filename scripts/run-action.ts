// The shared shape of the operator's one-run commands (`cancel`, `retry`): --workspace W --run R,
// config and secrets registered before anything is logged, one JSON line on stdout, and the exit
// code from the error: 2 no such run in that workspace (or bad arguments), 3 refused, 1 otherwise.
import { loadConfigOrExit, type Config } from '../core/config.ts';
import { EchodoError, errorMessage } from '../core/errors.ts';
import { openDatabase, type Database } from '../store/connection.ts';
import { registerConfigSecrets, registerStartupSecrets } from '../worker/secrets.ts';
import { exitOnStartupError, parseCli, usageError } from './cli.ts';

export interface RunActionContext {
  config: Config;
  db: Database;
  workspaceId: string;
  agentRunId: string;
}

export async function runActionCommand(name: string, act: (ctx: RunActionContext) => Promise<unknown>): Promise<never> {
  exitOnStartupError(name);
  const usage = `npm run ${name} -- --workspace W --run R`;
  const { values, positionals } = parseCli({ workspace: { type: 'string' }, run: { type: 'string' } }, usage);
  if (positionals.length) usageError(usage, `unexpected argument(s): ${positionals.join(' ')}`);
  if (!values.workspace || !values.run) usageError(usage, 'both --workspace and --run are required');

  const config = loadConfigOrExit();
  registerConfigSecrets(config); // before anything is logged or stored
  const db = await openDatabase(config);
  await registerStartupSecrets(config, db);
  let code = 0;
  try {
    const answer = await act({ config, db, workspaceId: values.workspace, agentRunId: values.run });
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
