// npm run workspace -- create W
// npm run workspace -- add-model W --alias A --base-url URL --model M [--key-env VAR]
import { loadConfigOrExit } from '../worker/config.ts';
import { openDatabase } from '../store/connection.ts';
import { createWorkspace } from '../store/runs.ts';
import { upsertModelProvider } from '../store/workspace-config.ts';
import { withWorkspace } from '../store/workspace.ts';
import { assertKeyVarAllowed, parseKeyVarGlobs, ProviderKeyVarRefusedError } from '../worker/models/key-vars.ts';
import { exitOnStartupError, parseCli, usageError } from './cli.ts';

exitOnStartupError('workspace');

const USAGE = 'npm run workspace -- create W | add-model W --alias A --base-url URL --model M [--key-env VAR]';
const { values, positionals } = parseCli(
  { alias: { type: 'string' }, 'base-url': { type: 'string' }, model: { type: 'string' }, 'key-env': { type: 'string' } },
  USAGE,
);
const [command, workspaceId] = positionals;
if (!workspaceId || !['create', 'add-model'].includes(command ?? '')) usageError(USAGE);
if (command === 'add-model' && (!values.alias || !values['base-url'] || !values.model)) usageError(USAGE, 'add-model needs --alias, --base-url and --model');

const config = loadConfigOrExit();
// A provider may only name a variable matching WORKER_PROVIDER_KEY_VARS (docs/security.md).
const keyVarGlobs = parseKeyVarGlobs(config.WORKER_PROVIDER_KEY_VARS);
try {
  if (command === 'add-model') assertKeyVarAllowed(values['key-env'], keyVarGlobs);
} catch (err) {
  if (!(err instanceof ProviderKeyVarRefusedError)) throw err;
  process.stderr.write(`${err.message}\n`);
  process.exit(2);
}
const db = await openDatabase(config);
await withWorkspace(db.app, workspaceId, async (tx) => {
  await createWorkspace(tx);
  if (command === 'add-model') {
    await upsertModelProvider(tx, { alias: values.alias!, provider: 'openai-compatible', base_url: values['base-url']!, model: values.model!, api_key_env_var: values['key-env'] ?? null }, keyVarGlobs);
  }
});
process.stdout.write(`${command === 'create' ? `workspace ${workspaceId} ready` : `model ${values.alias} added to ${workspaceId}`}\n`);
await db.close();
