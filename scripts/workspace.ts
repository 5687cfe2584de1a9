// npm run workspace -- create|model|harness|route|key|repo …: a workspace's settings and the
// operator's grants (the spec below is its help). Every input is checked before a database is
// opened: a refusal names the reason (exit 2) and changes nothing.
import type { Sql } from 'postgres';
import { loadConfigOrExit } from '../core/config.ts';
import { connect, openDatabase, resolveDatabaseUrl } from '../store/connection.ts';
import { registerConfigSecrets, registerStartupSecrets } from '../worker/secrets.ts';
import { createWorkspace, workspaceExists } from '../store/runs.ts';
import { harnessOverride, modelProvider, upsertModelProvider } from '../store/settings-lookup.ts';
import {
  listHarnesses,
  listModelProviders,
  listRoutes,
  removeHarness,
  removeModelProvider,
  removeRoute,
  upsertHarness,
  upsertRoute,
} from '../store/settings-edit.ts';
import { keyGrantOf } from '../store/grants.ts';
import { withWorkspace, type WorkspaceTx } from '../store/workspace.ts';
import { redactString, registerSecretsFromEnv } from '../core/redact.ts';
import { EchodoError, errorMessage } from '../core/errors.ts';
import { parseKeyVarGlobs } from '../core/key-vars.ts';
import { builtinHarnesses } from '../worker/run/harnesses.ts';
import { harnessInput, modelInput, routeInput, testHarness, testModelProvider } from '../operator/settings.ts';
import {
  grantHosts,
  grantVariable,
  keyGrant,
  keyList,
  keyRevoke,
  repoAdd,
  repoList,
  repoRealpath,
  repoRemove,
} from './workspace-grants.ts';
import { COST_COMMANDS, COST_FLAGS, planCostCommand } from './workspace-cost.ts';
import { setQuota, setRetention } from '../store/storage.ts';
import { byteSize, wholeNumber } from '../operator/storage-input.ts';
import { command, exitOnStartupError } from './cli.ts';
import { DATABASE_ENV } from './cli-env.ts';

const W = '--workspace W';
const { values, positionals, fail } = command({
  name: 'workspace',
  summary:
    'creates a workspace and manages its settings (model providers, harnesses, role → harness routes) and the ' +
    "operator's grants: the key variables its provider rows may name (and the hosts a key may go to), and the " +
    'repositories its jobs may name as repoPath. The workspace may also be given as the first argument after ' +
    "the subcommand (e.g. `model list acme`). Grants (key, repo) are written with the owner's connection " +
    '(DATABASE_URL, or the embedded server), never the app login.',
  usage: [
    `-- create ${W}`,
    `-- model add ${W} --alias A --provider openai-compatible|anthropic|openai [--base-url U] --model M ` +
      '[--key-env VAR]',
    `-- model list ${W} | model rm ${W} --alias A | model test ${W} --alias A`,
    `-- harness add ${W} ALIAS|--alias A [--adapter minimal|remote-ag-ui|langgraph|crewai] [--url URL] ` +
      '[--key-env VAR] [--no-worktree] [--allow CMD]… [--write-prefix P]…',
    `-- harness list ${W} | harness rm ${W} ALIAS|--alias A | harness test ${W} ALIAS|--alias A`,
    `-- route add ${W} --role R --harness H | route list ${W} | route rm ${W} --role R`,
    `-- key grant ${W} VAR [--host H]… | key list [${W}] | key revoke ${W} VAR`,
    `-- repo add ${W} PATH [--shared] | repo list [${W}] | repo rm ${W} PATH`,
    `-- price set ${W} --model M --input-per-mtok N --output-per-mtok N [--cache-read-per-mtok N] ` +
      '[--cache-write-per-mtok N]',
    `-- price list ${W} | price rm ${W} --model M | budget set ${W} --daily-usd N`,
    `-- retention set ${W} [--keep-last K] [--keep-days D] | quota set ${W} --bytes N`,
  ],
  flags: {
    workspace: { type: 'string', value: 'W', help: 'the workspace (letters, digits, ".", "_", "-"; at most 64)' },
    alias: { type: 'string', value: 'A', help: 'model or harness alias' },
    'base-url': { type: 'string', value: 'URL', help: 'model add: the endpoint (required for openai-compatible)' },
    model: { type: 'string', value: 'M', help: "model add: the provider's model name; price set/rm: the model id" },
    'key-env': {
      type: 'string',
      value: 'VAR',
      help: 'model/harness add: the env variable holding the key (must be granted)',
    },
    adapter: {
      type: 'string',
      value: 'KIND',
      help: 'harness add: minimal (default), remote-ag-ui, langgraph or crewai',
    },
    url: { type: 'string', value: 'URL', help: "harness add: a remote adapter's AG-UI endpoint" },
    provider: {
      type: 'string',
      value: 'KIND',
      help: 'model add: openai-compatible (the default), anthropic or openai',
    },
    ...COST_FLAGS,
    'no-worktree': { type: 'boolean', help: 'harness add: the harness works without a worktree' },
    allow: { type: 'string', value: 'CMD', multiple: true, help: 'harness add: an allowed run_command' },
    'write-prefix': { type: 'string', value: 'P', multiple: true, help: 'harness add: a path prefix it may write' },
    role: { type: 'string', value: 'R', help: 'route add/rm: the role id' },
    harness: { type: 'string', value: 'H', help: 'route add: a built-in harness (code, doc-writer) or an alias' },
    host: { type: 'string', value: 'H', multiple: true, help: 'key grant: a host (or host:port) the key may go to' },
    shared: { type: 'boolean', help: 'repo add: other workspaces may register the repository too' },
    'keep-last': { type: 'string', value: 'K', help: 'retention set: a finished run keeps its last K checkpoints' },
    'keep-days': { type: 'string', value: 'D', help: 'retention set: ...once it finished D days ago (default 0)' },
    bytes: {
      type: 'string',
      value: 'N',
      help: 'quota set: bytes the workspace may hold before new runs are refused (500000, 500M, 20G, 1.5TiB)',
    },
  },
  positionals: {
    min: 1,
    max: 4,
    help: [
      'VAR   key grant/revoke: an env variable matching WORKER_PROVIDER_KEY_VARS',
      'PATH  repo add/rm: an absolute path to a local repository (compared as its realpath)',
    ],
  },
  exitCodes: {
    0: 'done',
    1: '`model test` or `harness test` failed, or an unexpected error (e.g. the database could not be reached)',
    2: 'bad arguments or a refused setting or grant (one line: why)',
  },
  env: [...DATABASE_ENV, 'WORKER_PROVIDER_KEY_VARS', 'WORKER_ALLOWED_COMMANDS'],
});
exitOnStartupError('workspace');

/** Extra positional arguments each command takes after the workspace; `optionalWorkspace`: lists of all. */
/** `optionalAlias`: the alias may be given as a positional ALIAS instead of --alias. */
const COMMANDS: Record<string, { args: string[]; optionalWorkspace?: boolean; optionalAlias?: boolean }> = {
  create: { args: [] },
  'model add': { args: [] },
  'model list': { args: [] },
  'model rm': { args: [] },
  'model test': { args: [] },
  'harness add': { args: [], optionalAlias: true },
  'harness list': { args: [] },
  'harness rm': { args: [], optionalAlias: true },
  'harness test': { args: [], optionalAlias: true },
  'route add': { args: [] },
  'route list': { args: [] },
  'route rm': { args: [] },
  'key grant': { args: ['VAR'] },
  'key list': { args: [], optionalWorkspace: true },
  'key revoke': { args: ['VAR'] },
  ...Object.fromEntries(COST_COMMANDS.map((c) => [c, { args: [] }])),
  'repo add': { args: ['PATH'] },
  'repo list': { args: [], optionalWorkspace: true },
  'repo rm': { args: ['PATH'] },
  'retention set': { args: [] },
  'quota set': { args: [] },
};
const WORKSPACE_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

// `add-model W` is the old spelling of `model add W` (it also creates the workspace).
const legacyAddModel = positionals[0] === 'add-model';
const words = legacyAddModel ? ['model', 'add', ...positionals.slice(1)] : positionals;
const key = words[0] === 'create' ? 'create' : `${words[0]} ${words[1] ?? ''}`.trim();
const shape = COMMANDS[key] ?? fail(`unknown command: ${words.slice(0, 2).join(' ')}`);
const rest = words.slice(key === 'create' ? 1 : 2);
let workspaceId: string | null = values.workspace ?? null;
// `harness add --workspace W ALIAS`: the alias as the last positional argument.
let harnessAlias = values.alias;
if (shape.optionalAlias && harnessAlias === undefined && rest.length === shape.args.length + (workspaceId ? 1 : 2)) {
  harnessAlias = rest.pop();
}
if (workspaceId === null && rest.length === shape.args.length + 1) workspaceId = rest.shift()!;
if (rest.length > shape.args.length) fail(`unexpected argument(s): ${rest.slice(shape.args.length).join(' ')}`);
if (rest.length < shape.args.length) fail(`${key} needs ${shape.args.slice(rest.length).join(' ')}`);
if (workspaceId === null && !shape.optionalWorkspace) fail(`${key} needs ${W}`);
if (workspaceId !== null && !WORKSPACE_NAME.test(workspaceId)) {
  fail(
    `workspace ${JSON.stringify(workspaceId)} must be 1-64 letters, digits, '.', '_' or '-', ` +
      'starting with a letter or digit',
  );
}
const [arg] = rest;

const config = loadConfigOrExit();
registerConfigSecrets(config); // before anything is logged or stored
const keyVarGlobs = parseKeyVarGlobs(config.WORKER_PROVIDER_KEY_VARS);
const out = (line: string) => process.stdout.write(`${line}\n`);
const refuse = (message: string): never => {
  process.stderr.write(`workspace: ${redactString(message)}\n`);
  process.exit(2);
};
const need = (value: string | undefined, flag: string): string => value ?? fail(`${key} needs --${flag}`);
/** The answer of an rm: done, or nothing of that name (exit 2). */
const removed = (done: boolean, what: string): number =>
  done ? (out(`${what} removed`), 0) : refuse(`no ${what} in workspace ${ws}`);

/** A setting, in one workspace transaction of the app role. */
type Planned = { kind: 'app'; run(tx: WorkspaceTx): Promise<number> };
/** A grant, over the owner's connection. */
type Granted = { kind: 'owner'; run(owner: Sql): Promise<number> };

const ws = workspaceId ?? '';
let after: (() => Promise<number>) | undefined;
let plan: Planned | Granted;
try {
  plan = await planCommand();
} catch (err) {
  if (err instanceof EchodoError) refuse(err.message);
  throw err;
}

async function planCommand(): Promise<Planned | Granted> {
  const app = (run: Planned['run']): Planned => ({ kind: 'app', run });
  const owner = (run: Granted['run']): Granted => ({ kind: 'owner', run });
  switch (key) {
    case 'create':
      return app(async (tx) => (await createWorkspace(tx), out(`workspace ${ws} ready`), 0));
    case 'model add': {
      const row = modelInput(
        {
          alias: values.alias,
          provider: values.provider,
          baseUrl: values['base-url'],
          model: values.model,
          keyEnv: values['key-env'],
        },
        keyVarGlobs,
      );
      return app(async (tx) => {
        if (legacyAddModel) await createWorkspace(tx);
        await upsertModelProvider(tx, row, keyVarGlobs);
        return (out(`model ${row.alias} added to ${ws}`), 0);
      });
    }
    case 'model list':
      return app(async (tx) => {
        for (const m of await listModelProviders(tx)) {
          const { alias, provider, model, api_key_env_var: keyEnv } = m;
          out(JSON.stringify({ alias, provider, baseUrl: m.base_url && redactString(m.base_url), model, keyEnv }));
        }
        return 0;
      });
    case 'model rm': {
      const alias = need(values.alias, 'alias');
      return app(async (tx) => removed(await removeModelProvider(tx, alias), `model ${alias}`));
    }
    case 'model test': {
      const alias = need(values.alias, 'alias');
      return app(async (tx) => {
        const row = await modelProvider(tx, alias);
        if (!row) return refuse(`no model ${alias} in workspace ${ws}`);
        const grant = row.api_key_env_var ? await keyGrantOf(tx, row.api_key_env_var) : undefined;
        // The call is made after the transaction: no connection waits on the network.
        after = async () => {
          registerSecretsFromEnv(process.env, row.api_key_env_var ? [row.api_key_env_var] : []);
          const result = await testModelProvider(row, { keyVarGlobs, keyGrant: grant });
          out(JSON.stringify({ alias, ...result }));
          return result.ok ? 0 : 1;
        };
        return 0;
      });
    }
    case 'harness add': {
      const row = harnessInput(
        {
          alias: harnessAlias,
          worktree: !values['no-worktree'],
          allow: values.allow,
          writePrefix: values['write-prefix'],
          adapter: values.adapter,
          url: values.url,
          keyEnv: values['key-env'],
        },
        keyVarGlobs,
      );
      return app(async (tx) => (await upsertHarness(tx, row), out(`harness ${row.alias} added to ${ws}`), 0));
    }
    case 'harness list':
      return app(async (tx) => {
        for (const h of await listHarnesses(tx)) {
          const { alias, needs_worktree: worktree, allowed_commands: allow, write_prefixes: writePrefixes } = h;
          const { adapter, key_env_var: keyEnv } = h;
          const url = h.endpoint_url === null ? null : redactString(h.endpoint_url);
          out(JSON.stringify({ alias, adapter, worktree, allow, writePrefixes, url, keyEnv }));
        }
        return 0;
      });
    case 'harness test': {
      const alias = need(harnessAlias, 'alias');
      return app(async (tx) => {
        const row = await harnessOverride(tx, alias);
        if (!row && builtinHarnesses(config)[alias])
          return (out(JSON.stringify({ alias, ok: true, adapter: 'minimal' })), 0);
        if (!row) return refuse(`no harness ${alias} in workspace ${ws}`);
        const grant = row.key_env_var ? await keyGrantOf(tx, row.key_env_var) : undefined;
        // The probe is made after the transaction: no connection waits on the network.
        after = async () => {
          registerSecretsFromEnv(process.env, row.key_env_var ? [row.key_env_var] : []);
          const result = await testHarness(row, { keyVarGlobs, keyGrant: grant });
          out(JSON.stringify({ alias, ...result }));
          return result.ok ? 0 : 1;
        };
        return 0;
      });
    }
    case 'harness rm': {
      const alias = need(harnessAlias, 'alias');
      return app(async (tx) => removed(await removeHarness(tx, alias), `harness ${alias}`));
    }
    case 'route add': {
      const route = routeInput({ role: need(values.role, 'role'), harness: need(values.harness, 'harness') });
      const builtin = Object.keys(builtinHarnesses(config));
      return app(async (tx) => {
        if (!builtin.includes(route.harness_alias) && !(await harnessOverride(tx, route.harness_alias))) {
          const h = route.harness_alias;
          return refuse(`harness ${h} is neither built in (${builtin.join(', ')}) nor a harness of workspace ${ws}`);
        }
        await upsertRoute(tx, route);
        return (out(`role ${route.role_id} → harness ${route.harness_alias}`), 0);
      });
    }
    case 'route list':
      return app(async (tx) => {
        for (const r of await listRoutes(tx)) out(JSON.stringify({ role: r.role_id, harness: r.harness_alias }));
        return 0;
      });
    case 'route rm': {
      const role = need(values.role, 'role');
      return app(async (tx) => removed(await removeRoute(tx, role), `route for role ${role}`));
    }
    case 'key grant': {
      const variable = grantVariable(arg!, keyVarGlobs);
      const hosts = grantHosts(values.host);
      return owner(async (sql) => {
        await keyGrant(sql, ws, variable, hosts);
        return (out(`${variable} granted to ${ws} for ${hosts.length ? hosts.join(', ') : 'any host'}`), 0);
      });
    }
    case 'key revoke':
      return owner(async (sql) => (await keyRevoke(sql, ws, arg!), out(`${arg} revoked from ${ws}`), 0));
    case 'key list':
      return owner(async (sql) => ((await keyList(sql, workspaceId)).forEach((l) => out(l)), 0));
    case 'repo add': {
      const real = await repoRealpath(arg!, config.ECHODO_HOME);
      const shared = values.shared ?? false;
      return owner(async (sql) => {
        await repoAdd(sql, ws, real, shared);
        return (out(`${real} registered to ${ws}${shared ? ' (shared)' : ''}`), 0);
      });
    }
    case 'repo rm':
      return owner(async (sql) => (await repoRemove(sql, ws, arg!), out(`${arg} unregistered from ${ws}`), 0));
    case 'repo list':
      return owner(async (sql) => ((await repoList(sql, workspaceId)).forEach((l) => out(l)), 0));
    case 'retention set': {
      const keepLast = wholeNumber(values['keep-last'], '--keep-last', 1);
      const keepDays = wholeNumber(values['keep-days'], '--keep-days', 0);
      if (keepLast === null && keepDays === null) fail('retention set needs --keep-last K and/or --keep-days D');
      return app(async (tx) => {
        await setRetention(tx, keepLast, keepDays);
        return (
          out(
            `retention of ${ws}: keep the last ${keepLast ?? 'all'} checkpoints of runs finished ${keepDays ?? 0} days ago`,
          ),
          0
        );
      });
    }
    case 'quota set': {
      const bytes = byteSize(values.bytes, '--bytes') ?? fail(`${key} needs --bytes`);
      return app(async (tx) => (await setQuota(tx, bytes), out(`quota of ${ws}: ${bytes} bytes`), 0));
    }
    case 'price set':
    case 'price list':
    case 'price rm':
    case 'budget set':
      return app(planCostCommand(key, values, out));
    default:
      return fail(`unknown command: ${key}`);
  }
}

// Grants are written only with the owner's connection: an app-only deployment has none here.
if (plan.kind === 'owner' && config.DATABASE_APP_URL && !config.DATABASE_URL) {
  refuse("key and repo grants are the operator's: set DATABASE_URL to the owner's connection (not the app login's)");
}

const db = await openDatabase(config);
await registerStartupSecrets(config, db);
let code = 0;
const mustExist = key !== 'create' && !legacyAddModel;
try {
  if (workspaceId !== null && mustExist && !(await withWorkspace(db.app, workspaceId, workspaceExists))) {
    refuse(`workspace "${workspaceId}" does not exist (npm run workspace -- create --workspace ${workspaceId})`);
  }
  if (plan.kind === 'app') {
    const planned = plan;
    code = await withWorkspace(db.app, ws, (tx) => planned.run(tx));
  } else {
    const owner = connect(await resolveDatabaseUrl(config), { max: 1 });
    try {
      code = await plan.run(owner);
    } finally {
      await owner.end({ timeout: 2 });
    }
  }
  if (after) code = await after();
} catch (err) {
  if (err instanceof EchodoError) refuse(err.message);
  // A constraint the database enforces (a value too long, say): the user's input, not a crash.
  const sqlState = String((err as { code?: unknown }).code ?? '');
  if (sqlState.startsWith('23')) refuse(`refused by the database: ${errorMessage(err)}`);
  process.stderr.write(`workspace: ${redactString(errorMessage(err))}\n`);
  code = 1;
} finally {
  await db.close();
}
process.exit(code);
