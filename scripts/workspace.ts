// npm run workspace -- create W
// npm run workspace -- model add|list|rm|test W …   (add-model W … is an alias of model add)
// npm run workspace -- harness add|list|rm W …, route add|list|rm W …
// Exit 0 ok, 2 bad arguments (the reason printed), 1 `model test` failed.
import { loadConfigOrExit } from '../core/config.ts';
import { openDatabase } from '../store/connection.ts';
import { registerConfigSecrets, registerStartupSecrets } from '../worker/secrets.ts';
import { createWorkspace, workspaceExists } from '../store/runs.ts';
import { modelProvider, upsertModelProvider } from '../store/workspace-config.ts';
import {
  listHarnesses, listModelProviders, listRoutes, removeHarness, removeModelProvider, removeRoute, upsertHarness, upsertRoute,
} from '../store/workspace-settings.ts';
import { withWorkspace, type WorkspaceTx } from '../store/workspace.ts';
import { redactString, registerSecretsFromEnv } from '../core/redact.ts';
import { EchodoError, errorMessage } from '../core/errors.ts';
import { parseKeyVarGlobs } from '../core/key-vars.ts';
import { harnessInput, modelInput, routeInput, testModelProvider } from '../worker/settings.ts';
import { exitOnStartupError, parseCli, usageError } from './cli.ts';

exitOnStartupError('workspace');

const USAGE = [
  'npm run workspace -- create W',
  '  | model add W --alias A --base-url URL --model M [--key-env VAR] [--provider openai-compatible]   (add-model: alias)',
  '  | model list W | model rm W --alias A | model test W --alias A',
  '  | harness add W --alias A [--no-worktree] [--allow CMD]… [--write-prefix P]… | harness list W | harness rm W --alias A',
  '  | route add W --role R --harness H | route list W | route rm W --role R',
].join('\n');
const { values, positionals } = parseCli(
  {
    alias: { type: 'string' },
    'base-url': { type: 'string' },
    model: { type: 'string' },
    'key-env': { type: 'string' },
    provider: { type: 'string' },
    'no-worktree': { type: 'boolean', default: false },
    allow: { type: 'string', multiple: true },
    'write-prefix': { type: 'string', multiple: true },
    role: { type: 'string' },
    harness: { type: 'string' },
  },
  USAGE,
);

// `add-model W` is the old spelling of `model add W`.
const args = positionals[0] === 'add-model' ? ['model', 'add', ...positionals.slice(1)] : positionals;
const [group, verb, workspaceId] = args[0] === 'create' ? ['create', 'create', args[1]] : args;
const VERBS: Record<string, string[]> = { create: ['create'], model: ['add', 'list', 'rm', 'test'], harness: ['add', 'list', 'rm'], route: ['add', 'list', 'rm'] };
if (!group || !VERBS[group]?.includes(verb ?? '')) usageError(USAGE, group ? `unknown command: ${args.join(' ')}` : undefined);
if (!workspaceId) usageError(USAGE, 'the workspace W is required');
if (args.length > (group === 'create' ? 2 : 3)) usageError(USAGE, `unexpected argument(s): ${args.slice(group === 'create' ? 2 : 3).join(' ')}`);

const config = loadConfigOrExit();
registerConfigSecrets(config); // before anything is logged or stored
const keyVarGlobs = parseKeyVarGlobs(config.WORKER_PROVIDER_KEY_VARS);
const out = (line: string) => process.stdout.write(`${line}\n`);
const refuse = (message: string): never => {
  process.stderr.write(`${redactString(message)}\n`);
  process.exit(2);
};

// Input is checked before the database is opened: a refusal names the reason and changes nothing.
let planned: (tx: WorkspaceTx) => Promise<number> = async () => 0;
let after: (() => Promise<number>) | undefined;
try {
  const key = `${group} ${verb}`;
  if (key === 'create create') {
    planned = async (tx) => (await createWorkspace(tx), out(`workspace ${workspaceId} ready`), 0);
  } else if (key === 'model add') {
    const row = modelInput({ alias: values.alias, provider: values.provider, baseUrl: values['base-url'], model: values.model, keyEnv: values['key-env'] }, keyVarGlobs);
    // The old spelling also created the workspace; kept for the scripts that rely on it.
    const create = positionals[0] === 'add-model';
    planned = async (tx) => {
      if (create) await createWorkspace(tx);
      await upsertModelProvider(tx, row, keyVarGlobs);
      out(`model ${row.alias} added to ${workspaceId}`);
      return 0;
    };
  } else if (key === 'model list') {
    planned = async (tx) => {
      for (const m of await listModelProviders(tx)) out(JSON.stringify({ alias: m.alias, provider: m.provider, baseUrl: redactString(m.base_url), model: m.model, keyEnv: m.api_key_env_var }));
      return 0;
    };
  } else if (key === 'model rm') {
    const alias = values.alias ?? refuse('model rm needs --alias');
    planned = async (tx) => ((await removeModelProvider(tx, alias)) ? (out(`model ${alias} removed`), 0) : refuse(`no model ${alias} in workspace ${workspaceId}`));
  } else if (key === 'model test') {
    const alias = values.alias ?? refuse('model test needs --alias');
    planned = async (tx) => {
      const row = await modelProvider(tx, alias);
      if (!row) return refuse(`no model ${alias} in workspace ${workspaceId}`);
      // The call is made after the transaction: no connection waits on the network.
      after = async () => {
        registerSecretsFromEnv(process.env, row.api_key_env_var ? [row.api_key_env_var] : []);
        const result = await testModelProvider(row, { keyVarGlobs });
        out(JSON.stringify({ alias, ...result }));
        return result.ok ? 0 : 1;
      };
      return 0;
    };
  } else if (key === 'harness add') {
    const row = harnessInput({ alias: values.alias, worktree: !values['no-worktree'], allow: values.allow, writePrefix: values['write-prefix'] });
    planned = async (tx) => (await upsertHarness(tx, row), out(`harness ${row.alias} added to ${workspaceId}`), 0);
  } else if (key === 'harness list') {
    planned = async (tx) => {
      for (const h of await listHarnesses(tx)) out(JSON.stringify({ alias: h.alias, worktree: h.needs_worktree, allow: h.allowed_commands, writePrefixes: h.write_prefixes }));
      return 0;
    };
  } else if (key === 'harness rm') {
    const alias = values.alias ?? refuse('harness rm needs --alias');
    planned = async (tx) => ((await removeHarness(tx, alias)) ? (out(`harness ${alias} removed`), 0) : refuse(`no harness ${alias} in workspace ${workspaceId}`));
  } else if (key === 'route add') {
    const route = routeInput({ role: values.role, harness: values.harness });
    planned = async (tx) => (await upsertRoute(tx, route), out(`role ${route.role_id} → harness ${route.harness_alias}`), 0);
  } else if (key === 'route list') {
    planned = async (tx) => {
      for (const r of await listRoutes(tx)) out(JSON.stringify({ role: r.role_id, harness: r.harness_alias }));
      return 0;
    };
  } else if (key === 'route rm') {
    const role = values.role ?? refuse('route rm needs --role');
    planned = async (tx) => ((await removeRoute(tx, role)) ? (out(`route of role ${role} removed`), 0) : refuse(`no route for role ${role} in workspace ${workspaceId}`));
  }
} catch (err) {
  if (err instanceof EchodoError) refuse(err.message);
  throw err;
}

const db = await openDatabase(config);
await registerStartupSecrets(config, db);
let code = 0;
try {
  code = await withWorkspace(db.app, workspaceId, async (tx) => {
    if (group !== 'create' && positionals[0] !== 'add-model' && !(await workspaceExists(tx))) return refuse(`workspace "${workspaceId}" does not exist (npm run workspace -- create ${workspaceId})`);
    return planned(tx);
  });
  if (after) code = await after();
} catch (err) {
  if (err instanceof EchodoError) refuse(err.message);
  process.stderr.write(`workspace: ${redactString(errorMessage(err))}\n`);
  code = 1;
} finally {
  await db.close();
}
process.exit(code);
