// The app's own login role (migration 006): every runtime connection logs in as
// echodo_app_login, never as the superuser, so no app connection can SET ROLE its way back to
// one. Its password is generated once per ECHODO_HOME and kept in <home>/app-role.json (0600);
// the migrating superuser sets it on the role only when the login does not work with it. With
// DATABASE_APP_URL the operator manages the login instead and none of this runs.
import { createHash, createHmac, pbkdf2Sync, randomBytes, timingSafeEqual } from 'node:crypto';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import type { Sql } from 'postgres';
import { EchodoError } from '../core/errors.ts';

export const APP_LOGIN_ROLE = 'echodo_app_login';
export const APP_GROUP_ROLE = 'echodo_app';
export const APP_ROLE_FILE = 'app-role.json';
const LOCK_KEY = 7_201_411_006; // arbitrary, fixed: "echodo app login password"
const SCRAM_ITERATIONS = 4096;

/** Predefined roles that read or write any data or files: membership in one is a privilege. */
const PRIVILEGED_PREDEFINED = [
  'pg_read_all_data',
  'pg_write_all_data',
  'pg_execute_server_program',
  'pg_read_server_files',
  'pg_write_server_files',
];

export class DatabaseRoleError extends EchodoError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('internal', message, options);
    this.name = 'DatabaseRoleError';
  }
}

export interface AppCredentials {
  role: string;
  password: string;
}

export function appRoleFile(home: string): string {
  return path.join(path.resolve(home), APP_ROLE_FILE);
}

/**
 * The home's app login credentials, generated on first use. Created with link() so that processes
 * starting together in a fresh home agree on one password.
 */
export async function readOrCreateAppCredentials(home: string): Promise<AppCredentials> {
  const file = appRoleFile(home);
  const existing = await readCredentials(file);
  if (existing) return existing;
  await fs.mkdir(path.dirname(file), { recursive: true, mode: 0o700 });
  const fresh: AppCredentials = { role: APP_LOGIN_ROLE, password: randomBytes(24).toString('base64url') };
  await writeCredentialsExclusive(file, fresh);
  const stored = await readCredentials(file);
  if (!stored) throw new DatabaseRoleError(`${file} could not be written`);
  return stored;
}

/** Writes credentials unless the file exists (then the one there wins). Tests use it to hand out a known password. */
export async function writeCredentialsExclusive(file: string, credentials: AppCredentials): Promise<void> {
  const tmp = `${file}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  await fs.writeFile(tmp, `${JSON.stringify(credentials, null, 2)}\n`, { mode: 0o600 });
  try {
    await fs.chmod(tmp, 0o600);
    await fs.link(tmp, file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  } finally {
    await fs.rm(tmp, { force: true });
  }
}

async function readCredentials(file: string): Promise<AppCredentials | null> {
  let text: string;
  try {
    text = await fs.readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw new DatabaseRoleError(`cannot read ${file}: ${(err as Error).message}`, { cause: err });
  }
  try {
    const parsed = JSON.parse(text) as Partial<AppCredentials>;
    if (parsed.role === APP_LOGIN_ROLE && typeof parsed.password === 'string' && parsed.password.length >= 16) {
      return { role: parsed.role, password: parsed.password };
    }
  } catch {
    // reported below
  }
  throw new DatabaseRoleError(
    `${file} is not a valid app role file ({"role":"${APP_LOGIN_ROLE}","password":"…"}); remove it to generate a new password`,
  );
}

/** The superuser URL with the app login's credentials in place of the superuser's. */
export function appLoginUrl(superuserUrl: string, credentials: AppCredentials): string {
  const url = new URL(superuserUrl);
  url.username = encodeURIComponent(credentials.role);
  url.password = encodeURIComponent(credentials.password);
  url.searchParams.delete('user');
  url.searchParams.delete('password');
  return url.toString();
}

/** A SCRAM-SHA-256 verifier, so the ALTER ROLE statement (and any server log of it) never holds the password. */
export function scramVerifier(password: string, salt = randomBytes(16), iterations = SCRAM_ITERATIONS): string {
  const { storedKey, serverKey } = scramKeys(password, salt, iterations);
  return `SCRAM-SHA-256$${iterations}:${salt.toString('base64')}$${storedKey.toString('base64')}:${serverKey.toString('base64')}`;
}

/** Whether a stored rolpassword (SCRAM or md5) accepts `password`. */
export function verifierAccepts(stored: string, password: string, role: string): boolean {
  const scram = /^SCRAM-SHA-256\$(\d+):([^$]+)\$([^:]+):(.+)$/.exec(stored);
  if (scram) {
    const { storedKey } = scramKeys(password, Buffer.from(scram[2]!, 'base64'), Number(scram[1]));
    const expected = Buffer.from(scram[3]!, 'base64');
    return expected.length === storedKey.length && timingSafeEqual(expected, storedKey);
  }
  if (stored.startsWith('md5'))
    return (
      stored ===
      `md5${createHash('md5')
        .update(password + role)
        .digest('hex')}`
    );
  return false;
}

function scramKeys(password: string, salt: Buffer, iterations: number): { storedKey: Buffer; serverKey: Buffer } {
  const salted = pbkdf2Sync(password.normalize('NFKC'), salt, iterations, 32, 'sha256');
  const clientKey = createHmac('sha256', salted).update('Client Key').digest();
  return {
    storedKey: createHash('sha256').update(clientKey).digest(),
    serverKey: createHmac('sha256', salted).update('Server Key').digest(),
  };
}

/**
 * Gives the login role `credentials.password`, run by the migrating connection after the login
 * failed with it. A role whose password another home set is left alone unless `mayReset` (the
 * embedded server belongs to this home): overwriting it would lock that home's processes out.
 */
export async function setAppLoginPassword(
  su: Sql,
  credentials: AppCredentials,
  options: { mayReset: boolean; home: string },
): Promise<void> {
  await su.begin(async (tx) => {
    await tx`select pg_advisory_xact_lock(${LOCK_KEY})`;
    const [me] = await tx<{ rolsuper: boolean }[]>`select rolsuper from pg_roles where rolname = current_user`;
    const [role] = await tx<
      { rolcanlogin: boolean }[]
    >`select rolcanlogin from pg_roles where rolname = ${credentials.role}`;
    if (!role) {
      throw new DatabaseRoleError(
        `role ${credentials.role} does not exist: migrate the database first (npm run db -- migrate)`,
      );
    }
    if (me?.rolsuper) {
      const [row] = await tx<
        { rolpassword: string | null }[]
      >`select rolpassword from pg_authid where rolname = ${credentials.role}`;
      if (row?.rolpassword && verifierAccepts(row.rolpassword, credentials.password, credentials.role)) return; // set meanwhile
      if (row?.rolpassword && !options.mayReset) {
        throw new DatabaseRoleError(
          `role ${credentials.role} already has a password that is not the one in ${appRoleFile(options.home)} ` +
            '(another ECHODO_HOME set it, or this file was replaced): copy app-role.json from the home that set it, ' +
            'or set DATABASE_APP_URL to a login you manage',
        );
      }
    }
    // A verifier literal: base64 and `$:` only, no quote can occur.
    await tx.unsafe(`alter role ${credentials.role} with login password '${scramVerifier(credentials.password)}'`);
  });
}

/** Whether a connection error is the server refusing the password (or the role). */
export function isAuthFailure(err: unknown): boolean {
  return (err as { code?: string })?.code === '28P01';
}

/**
 * Refuses a runtime connection that could reach more than one workspace's rows: a superuser, a
 * BYPASSRLS role, a role that can create roles or databases, one that owns our tables (it could
 * turn row-level security off), or a member of any of those (it could SET ROLE to it).
 * Returns the role's name.
 */
export async function assertUnprivileged(sql: Sql, source: string): Promise<string> {
  const [me] = await sql<{ role: string; in_app: boolean; privileged: string[]; owns: string[] }[]>`
    select current_user as role,
           pg_has_role(current_user, ${APP_GROUP_ROLE}, 'USAGE') as in_app,
           array(select r.rolname::text from pg_roles r
                  where pg_has_role(current_user, r.oid, 'MEMBER')
                    and (r.rolsuper or r.rolbypassrls or r.rolcreaterole or r.rolcreatedb or r.rolreplication
                         or r.rolname = any(${PRIVILEGED_PREDEFINED}))
                  order by 1) as privileged,
           array(select c.relname::text from pg_class c
                  where c.relnamespace = 'public'::regnamespace and c.relkind in ('r', 'p')
                    and pg_has_role(current_user, c.relowner, 'MEMBER')
                  order by 1 limit 5) as owns`;
  if (!me) throw new DatabaseRoleError(`${source}: could not read the connection's role`);
  if (me.privileged.length) {
    throw new DatabaseRoleError(
      `${source} logs in as ${me.role}, which is or can become a privileged role (${me.privileged.join(', ')}): ` +
        `the app needs a login that is a member of ${APP_GROUP_ROLE} only`,
    );
  }
  if (me.owns.length) {
    throw new DatabaseRoleError(
      `${source} logs in as ${me.role}, which owns ${me.owns.join(', ')} and could switch row-level security off: ` +
        `use a login that is a member of ${APP_GROUP_ROLE} only`,
    );
  }
  if (!me.in_app) {
    throw new DatabaseRoleError(
      `${source} logs in as ${me.role}, which is not a member of ${APP_GROUP_ROLE}: grant ${APP_GROUP_ROLE} to ${me.role}`,
    );
  }
  return me.role;
}
