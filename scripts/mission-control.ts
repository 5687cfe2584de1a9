// npm run mission-control: the operator panel, and its tokens (the description below is its --help).
import { openDatabase, type Database } from '../store/connection.ts';
import { setUpTrees } from '../worker/tree/setup.ts';
import {
  createAdminTokenWithId,
  createWorkspaceTokenWithId,
  listTokens,
  parseDuration,
  revokeToken,
  type TokenInfo,
} from '../store/tokens.ts';
import { loadConfigOrExit } from '../core/config.ts';
import { EchodoError, errorMessage } from '../core/errors.ts';
import { registerConfigSecrets, registerStartupSecrets } from '../worker/secrets.ts';
import { command, exitOnStartupError } from './cli.ts';
import { DATABASE_ENV } from './cli-env.ts';
import { createMissionControl } from '../mission-control/server.ts';
import { superviseUnlessChild } from '../core/supervisor.ts';
import { createLogger } from '../worker/log.ts';

const { values, positionals, fail } = command({
  name: 'mission-control',
  summary:
    'the operator panel and its JSON API on 127.0.0.1:MISSION_CONTROL_PORT, or (token …) the bearer tokens ' +
    'that open it: a workspace token (read-write, or --read-only) or an admin token that reads the fleet. ' +
    'A new token is printed once and stored only as its sha256.',
  usage: [
    '',
    '-- token create (--workspace W [--read-only] | --admin) [--expires 30d]',
    '-- token list [--workspace W] [--json]',
    '-- token revoke ID',
  ],
  flags: {
    workspace: {
      type: 'string',
      value: 'W',
      help: 'token create: the workspace the token opens; token list: only its',
    },
    admin: { type: 'boolean', help: 'token create: an admin (fleet) token' },
    'read-only': { type: 'boolean', help: 'token create: a token that may only read (every POST answers 403)' },
    expires: { type: 'string', value: 'DURATION', help: 'token create: expiry, e.g. 30d, 12h, 90m or 2w' },
    json: { type: 'boolean', help: 'token list: as JSON' },
  },
  positionals: { min: 0, max: 3, help: ['token create | list | revoke ID   manage tokens (none: serve the panel)'] },
  exitCodes: {
    0: 'done (the panel: stopped on SIGTERM/SIGINT)',
    1: 'an error',
    2: 'bad arguments, an unknown workspace or token id',
  },
  env: [...DATABASE_ENV, 'MISSION_CONTROL_PORT', 'ECHODO_SUPERVISE', 'LOG_LEVEL'],
});
exitOnStartupError('mission-control');

type Command =
  | { kind: 'serve' }
  | { kind: 'create'; workspace?: string; admin: boolean; readOnly: boolean; expiresAt?: Date }
  | { kind: 'list'; workspace?: string; json: boolean }
  | { kind: 'revoke'; id: string };

function parseCommand(): Command {
  const [noun, verb, ...rest] = positionals;
  if (!noun && Object.values(values).every((v) => v === undefined)) return { kind: 'serve' };
  if (noun !== 'token' || !verb) return fail(`unknown command: ${process.argv.slice(2).join(' ')}`);
  const only = (allowed: string[]) => {
    const given = Object.keys(values).filter((k) => values[k as keyof typeof values] !== undefined);
    const extra = given.filter((k) => !allowed.includes(k));
    if (extra.length) fail(`token ${verb} does not take ${extra.map((k) => `--${k}`).join(', ')}`);
  };
  switch (verb) {
    case 'create': {
      only(['workspace', 'admin', 'read-only', 'expires']);
      if (rest.length) fail(`unexpected argument: ${rest.join(' ')}`);
      if (Boolean(values.workspace) === Boolean(values.admin)) {
        fail('token create needs exactly one of --workspace W or --admin');
      }
      if (values.admin && values['read-only']) {
        fail('--read-only is for workspace tokens; an admin token only reads the fleet');
      }
      let expiresAt: Date | undefined;
      if (values.expires !== undefined) {
        const ms = parseDuration(values.expires);
        if (!ms) fail(`--expires: "${values.expires}" is not a duration like 30d, 12h, 90m or 2w`);
        expiresAt = new Date(Date.now() + ms!);
      }
      const readOnly = values['read-only'] ?? false;
      return { kind: 'create', workspace: values.workspace, admin: values.admin ?? false, readOnly, expiresAt };
    }
    case 'list':
      only(['workspace', 'json']);
      if (rest.length) fail(`unexpected argument: ${rest.join(' ')}`);
      return { kind: 'list', workspace: values.workspace, json: values.json ?? false };
    case 'revoke':
      only([]);
      if (rest.length !== 1) fail('token revoke needs exactly one token id (see token list)');
      return { kind: 'revoke', id: rest[0]! };
    default:
      return fail(`unknown command: token ${verb}`);
  }
}

function tokenTable(tokens: TokenInfo[]): string {
  const when = (d: Date | null) => (d ? d.toISOString().replace(/\.\d{3}Z$/, 'Z') : '-');
  const rows = tokens.map((t) => [
    t.id,
    t.workspaceId || '(fleet)',
    t.kind,
    when(t.createdAt),
    when(t.lastUsedAt),
    when(t.expiresAt),
    t.revokedAt ? `revoked ${when(t.revokedAt)}` : t.expiresAt && t.expiresAt <= new Date() ? 'expired' : 'active',
  ]);
  const header = ['id', 'workspace', 'kind', 'created', 'last used', 'expires', 'status'];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  return (
    [header, ...rows]
      .map((r) =>
        r
          .map((cell, i) => cell.padEnd(widths[i]!))
          .join('  ')
          .trimEnd(),
      )
      .join('\n') + '\n'
  );
}

async function runTokenCommand(db: Database, command: Exclude<Command, { kind: 'serve' }>): Promise<number> {
  switch (command.kind) {
    case 'create': {
      try {
        const created = command.admin
          ? await createAdminTokenWithId(db.admin, { expiresAt: command.expiresAt })
          : await createWorkspaceTokenWithId(db.app, command.workspace!, {
              readOnly: command.readOnly,
              expiresAt: command.expiresAt,
            });
        process.stdout.write(`${created.token}\n`);
        const what = command.admin
          ? 'admin token'
          : `${command.readOnly ? 'read-only' : 'read-write'} token for workspace ${command.workspace}`;
        const until = command.expiresAt ? `, expires ${command.expiresAt.toISOString()}` : '';
        process.stderr.write(`${what} (id ${created.id}${until}): shown once, stored only as its sha256\n`);
        return 0;
      } catch (err) {
        if (err instanceof EchodoError && err.code === 'workspace_not_found') {
          process.stderr.write(`${err.message}\n`);
          return 2;
        }
        throw err;
      }
    }
    case 'list': {
      const tokens = await listTokens(db.admin, command.workspace);
      process.stdout.write(command.json ? `${JSON.stringify(tokens)}\n` : tokenTable(tokens));
      return 0;
    }
    case 'revoke': {
      const outcome = await revokeToken(db.admin, command.id);
      if (outcome === 'unknown') {
        process.stderr.write(
          `no token with id ${JSON.stringify(command.id)} (see: npm run mission-control -- token list)\n`,
        );
        return 2;
      }
      process.stdout.write(`token ${command.id} ${outcome}\n`);
      return 0;
    }
  }
}

async function main(): Promise<void> {
  const command = parseCommand();
  const config = loadConfigOrExit();
  registerConfigSecrets(config);
  if (command.kind === 'serve') {
    const log = createLogger({ name: 'mission-control', level: config.LOG_LEVEL });
    await superviseUnlessChild({ name: 'mission-control', enabled: config.ECHODO_SUPERVISE, log });
  }
  if (command.kind === 'serve') await setUpTrees(config); // diffs read worktrees through tree processes
  const db = await openDatabase(config);
  // Operator actions write events and reasons; the panel logs: both go through the redactor.
  await registerStartupSecrets(config, db);

  if (command.kind !== 'serve') {
    try {
      process.exitCode = await runTokenCommand(db, command);
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
