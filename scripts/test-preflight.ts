// `npm test`'s preflight: the suite needs redis-server (queue tests), Chromium (mission control's
// browser test) and bwrap (the run_command sandbox), and never skips a test for want of one.
// Missing one: as root on a Debian-like system (apt-get on PATH, /etc/debian_version) it is
// installed with apt-get (one `apt-get update` first), and the preflight says so; otherwise the
// preflight stops before anything runs, naming each missing program and the command that
// installs it. Run on its own: `tsx scripts/test-preflight.ts` (exit 0 ready, 1 not).
import { spawnSync } from 'node:child_process';
import { accessSync, constants, existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export interface Requirement {
  /** The program looked for on PATH (the first name found wins). */
  names: string[];
  /** The Debian package that provides it. */
  aptPackage: string;
  /** Why the suite needs it (shown when it is missing). */
  usedBy: string;
}

export const REQUIREMENTS: Requirement[] = [
  { names: ['redis-server'], aptPackage: 'redis-server', usedBy: 'the Redis queue tests' },
  { names: ['chromium', 'chromium-browser'], aptPackage: 'chromium', usedBy: "mission control's browser test" },
  { names: ['bwrap'], aptPackage: 'bubblewrap', usedBy: 'the run_command sandbox tests' },
];

export interface PreflightEnv {
  /** PATH to search (the process's own by default). */
  path: string;
  isRoot: boolean;
  /** /etc/debian_version exists and apt-get is on PATH. */
  aptGet: string | null;
  /** ECHODO_PREFLIGHT_INSTALL=never forbids installing even where it could. */
  installAllowed: boolean;
}

export type Found = Record<string, string>; // aptPackage → absolute path of the program

export type Plan =
  | { action: 'ready'; found: Found }
  | { action: 'install'; found: Found; missing: Requirement[]; aptGet: string }
  | { action: 'refuse'; found: Found; missing: Requirement[]; why: string };

/** The first executable file named `name` in the PATH's directories, or null. */
export function findOnPath(name: string, searchPath: string): string | null {
  for (const dir of searchPath.split(path.delimiter)) {
    if (!dir) continue;
    const candidate = path.join(dir, name);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return null;
}

export function findRequirements(searchPath: string): { found: Found; missing: Requirement[] } {
  const found: Found = {};
  const missing: Requirement[] = [];
  for (const req of REQUIREMENTS) {
    const at = req.names.map((n) => findOnPath(n, searchPath)).find((p) => p !== null);
    if (at) found[req.aptPackage] = at;
    else missing.push(req);
  }
  return { found, missing };
}

/** What to do, decided from what is on PATH and where we run. */
export function planPreflight(env: PreflightEnv): Plan {
  const { found, missing } = findRequirements(env.path);
  if (!missing.length) return { action: 'ready', found };
  if (!env.installAllowed)
    return { action: 'refuse', found, missing, why: 'installing is turned off (ECHODO_PREFLIGHT_INSTALL=never)' };
  if (!env.isRoot) return { action: 'refuse', found, missing, why: 'not running as root, so nothing is installed' };
  if (!env.aptGet)
    return { action: 'refuse', found, missing, why: 'not a Debian-like system with apt-get, so nothing is installed' };
  return { action: 'install', found, missing, aptGet: env.aptGet };
}

export function installCommand(missing: Requirement[]): string {
  return `apt-get update && apt-get install -y ${missing.map((m) => m.aptPackage).join(' ')}`;
}

/** The refusal, one line per missing program, then the command. */
export function refusalText(plan: Extract<Plan, { action: 'refuse' }>): string {
  return [
    `npm test needs ${plan.missing.length === 1 ? 'a program' : 'programs'} that ${plan.missing.length === 1 ? 'is' : 'are'} not installed, and skips no test for want of one (${plan.why}):`,
    ...plan.missing.map((m) => `  missing: ${m.names[0]} (Debian package ${m.aptPackage}), for ${m.usedBy}`),
    `install with: ${installCommand(plan.missing)}   (as root; or your system's package manager)`,
  ].join('\n');
}

export function environment(env: NodeJS.ProcessEnv = process.env): PreflightEnv {
  const searchPath = env.PATH ?? '';
  const aptGet = existsSync('/etc/debian_version') ? findOnPath('apt-get', searchPath) : null;
  return {
    path: searchPath,
    isRoot: typeof process.getuid === 'function' && process.getuid() === 0,
    aptGet,
    installAllowed: env.ECHODO_PREFLIGHT_INSTALL !== 'never',
  };
}

/**
 * Makes sure the suite's programs are there: returns their paths, installing them first where
 * allowed. Throws PreflightError (its message is the refusal) when they are not and cannot be.
 */
export class PreflightError extends Error {}

export function ensureTestPrerequisites(options: { env?: NodeJS.ProcessEnv; say: (line: string) => void }): Found {
  const env = options.env ?? process.env;
  const where = environment(env);
  const plan = planPreflight(where);
  if (plan.action === 'ready') return plan.found;
  if (plan.action === 'refuse') throw new PreflightError(refusalText(plan));

  const packages = plan.missing.map((m) => m.aptPackage);
  options.say(
    `preflight: missing ${plan.missing.map((m) => m.names[0]).join(', ')}; installing ${packages.join(' ')} with apt-get (root, Debian-like)`,
  );
  const aptEnv = { ...env, DEBIAN_FRONTEND: 'noninteractive' };
  const run = (args: string[]) =>
    spawnSync(plan.aptGet, args, { env: aptEnv, stdio: ['ignore', 'inherit', 'inherit'] });
  const update = run(['update', '-qq']);
  if (update.status !== 0)
    throw new PreflightError(`${refusalText({ ...plan, action: 'refuse', why: 'apt-get update failed' })}`);
  const install = run(['install', '-y', '-qq', '--no-install-recommends', ...packages]);
  if (install.status !== 0)
    throw new PreflightError(`${refusalText({ ...plan, action: 'refuse', why: 'apt-get install failed' })}`);

  const after = planPreflight({ ...where, installAllowed: false });
  if (after.action !== 'ready')
    throw new PreflightError(
      refusalText({ ...(after as Extract<Plan, { action: 'refuse' }>), why: 'still missing after apt-get install' }),
    );
  options.say(`preflight: installed ${packages.join(' ')}`);
  return after.found;
}

// Run directly: report and exit 0 (ready) or 1 (refused).
if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const say = (line: string) => process.stderr.write(`${line}\n`);
  try {
    const found = ensureTestPrerequisites({ say });
    say(
      `preflight: ready: ${Object.entries(found)
        .map(([pkg, at]) => `${pkg} ${at}`)
        .join(', ')}`,
    );
    process.exit(0);
  } catch (err) {
    say(err instanceof Error ? err.message : String(err));
    process.exit(1);
  }
}
