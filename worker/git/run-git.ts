// A thin, fast git runner: every git process the worker itself starts goes through runGit
// (one spawn per call, stdin supported), with the repository's power to run programs taken away.
import { spawn } from 'node:child_process';
import { readFileSync, statSync } from 'node:fs';
import path from 'node:path';

/** What to say of a failed git call: git's own stderr when it ran, else the error's message. */
export const gitErrorDetail = (err: unknown): string =>
  err instanceof GitError ? err.stderr.trim().slice(0, 400) : (err as Error).message;

export class GitError extends Error {
  constructor(
    readonly args: string[],
    readonly exitCode: number | null,
    readonly stderr: string,
  ) {
    super(`git ${args.join(' ')} failed (exit ${exitCode}): ${stderr.trim().slice(0, 500)}`);
    this.name = 'GitError';
  }
}

/** A fixed identity and no user config: checkpoints must not depend on who runs the worker. */
export const GIT_ENV: NodeJS.ProcessEnv = {
  PATH: process.env.PATH,
  HOME: process.env.HOME,
  LANG: 'C',
  GIT_TERMINAL_PROMPT: '0',
  GIT_CONFIG_NOSYSTEM: '1',
  GIT_ATTR_NOSYSTEM: '1',
  // Set and empty: git then ignores core.gitProxy from any config file (the variable wins).
  GIT_PROXY_COMMAND: '',
  GIT_PAGER: 'cat',
  GIT_AUTHOR_NAME: 'echodo-worker',
  GIT_AUTHOR_EMAIL: 'echodo-worker@localhost',
  GIT_COMMITTER_NAME: 'echodo-worker',
  GIT_COMMITTER_EMAIL: 'echodo-worker@localhost',
  // glibc otherwise shrinks and regrows the heap around each object git writes (fast-import,
  // pack-objects, index-pack): every brk is a TLB flush, slow on a VM. A pad and a trim threshold
  // keep the heap in place.
  GLIBC_TUNABLES: 'glibc.malloc.top_pad=1048576:glibc.malloc.trim_threshold=67108864',
};

/**
 * Repository-controlled configuration that would make git run a program, overridden with
 * command-line scope for every git the worker starts (that scope wins over every config file).
 * The repository is not trusted: its .git/config, .gitattributes and hooks come with it.
 */
export const SAFE_GIT_CONFIG: readonly string[] = [
  'core.hooksPath=/dev/null', // no hook runs, reference-transaction (update-ref, fast-import) included
  'core.fsmonitor=false', // no fsmonitor hook program
  'core.sshCommand=ssh', // a remote's ssh is ssh, not a configured program
  'core.pager=cat',
  'core.editor=true',
  'core.askPass=', // empty: no askpass program (and GIT_TERMINAL_PROMPT=0: no prompt)
  'credential.helper=', // empty resets the helper list: no credential helper program
  'diff.external=', // no external diff program; diffs are produced with SAFE_DIFF_ARGS
  'protocol.ext.allow=never', // no ext:: transport (runs an arbitrary command)
  // Only honoured from protected config (ours, the operator's); `env` makes the hook a no-op
  // wrapper, so pack-objects runs as it would without one.
  'uploadpack.packObjectsHook=env',
  // A nested repository the agent made is never entered: git would read its config and attributes.
  'submodule.recurse=false',
  'diff.ignoreSubmodules=all',
  'status.submoduleSummary=false',
  'fetch.recurseSubmodules=false',
];

const SAFE_PAIRS: [string, string][] = SAFE_GIT_CONFIG.map((kv) => {
  const at = kv.indexOf('=');
  return [kv.slice(0, at), kv.slice(at + 1)];
});

/**
 * A remote URL's credentials (`https://user:token@host/repo.git`) reach git through the
 * environment only: git is given the URL without them, and every worker git gets
 * `url.<with credentials>.insteadOf=<without>`, so git connects with them. git would otherwise
 * write them down: a clone keeps its URL as remote.origin.url in the repository's config (on disk
 * for good, and mounted read-only in every sandbox that runs git), and argv is readable by every
 * user of the host. A partial clone's later fetches of blobs go through the same rewrite. Only
 * http(s) and ftp(s) carry credentials this way; any other URL (ssh's user is not a secret) is
 * left as it is.
 */
const credentialRewrites = new Map<string, string>(); // without credentials -> with

/** The URL to give git for `url` (see credentialRewrites): registers its credentials, returns it without them. */
export function remoteForGit(url: string): string {
  const m = /^((?:https?|ftps?):\/\/)([^@/?#]*)@/i.exec(url);
  if (!m) return url;
  const anonymous = m[1]! + url.slice(m[0].length);
  credentialRewrites.set(anonymous, url);
  return anonymous;
}

/** Arguments for any diff the worker produces: no external diff, no textconv program. */
export const SAFE_DIFF_ARGS: readonly string[] = ['--no-ext-diff', '--no-textconv'];

// Drivers are named in .gitattributes (which the agent can write) and defined in config, so they
// cannot be switched off wholesale: each driver the config defines is emptied by name (an empty
// clean/smudge/process/textconv/command/driver runs nothing; `required` is lifted so an emptied
// filter is not a failure). The names are read once per repository and read again when one of
// the config files that defined them changes.
const DRIVER_KEY = /^(filter|diff|merge)\.(.+)\.(clean|smudge|process|required|textconv|command|driver)$/i;

/** The settings that change what `git add` stores for a file's bytes (last value wins, as in git). */
export interface CheckinConfig {
  autocrlf?: string;
  filemode?: string;
  symlinks?: string;
}
const CHECKIN_KEYS: Record<string, keyof CheckinConfig> = {
  'core.autocrlf': 'autocrlf',
  'core.filemode': 'filemode',
  'core.symlinks': 'symlinks',
};

interface DriverCache {
  pairs: [string, string][];
  /** undefined when git could not list the config. */
  checkin: CheckinConfig | undefined;
  /** Config files and their mtimes when the names were read (-1: absent). */
  stamps: [string, number][];
}

const driverCache = new Map<string, DriverCache>();
const DRIVER_CACHE_MAX = 512;

function mtimeOf(file: string): number {
  try {
    return statSync(file).mtimeMs;
  } catch {
    return -1;
  }
}

/**
 * The common git dir of the repository whose top is cwd (a working tree with its `.git` folder
 * or file, a linked worktree's `commondir`, or a bare repository), read from disk without
 * spawning git; undefined when cwd is none of these.
 */
export function commonDirOnDisk(cwd: string): string | undefined {
  try {
    const dotGit = path.join(cwd, '.git');
    const st = statSync(dotGit, { throwIfNoEntry: false });
    let gitDir: string;
    if (st?.isDirectory()) gitDir = dotGit;
    else if (st?.isFile())
      gitDir = path.resolve(
        cwd,
        readFileSync(dotGit, 'utf8')
          .trim()
          .replace(/^gitdir:\s*/, ''),
      );
    else return statSync(path.join(cwd, 'HEAD'), { throwIfNoEntry: false })?.isFile() ? cwd : undefined; // a bare repo
    try {
      return path.resolve(gitDir, readFileSync(path.join(gitDir, 'commondir'), 'utf8').trim());
    } catch {
      return gitDir; // no commondir: the git dir is the common dir
    }
  } catch {
    return undefined; // a half-made worktree: git itself will fail on it
  }
}

/** The repo's config file (common dir), found from cwd without spawning git; undefined outside a repo. */
function repoConfigFile(cwd: string): string | undefined {
  const common = commonDirOnDisk(cwd);
  return common && path.join(common, 'config');
}

function globalConfigFiles(): string[] {
  const home = process.env.HOME;
  const xdg = process.env.XDG_CONFIG_HOME ?? (home ? path.join(home, '.config') : undefined);
  return [home && path.join(home, '.gitconfig'), xdg && path.join(xdg, 'git', 'config')].filter(
    (f): f is string => !!f,
  );
}

function fresh(entry: DriverCache): boolean {
  return entry.stamps.every(([file, mtime]) => mtimeOf(file) === mtime);
}

async function repoConfig(cwd: string): Promise<DriverCache> {
  const cached = driverCache.get(cwd);
  if (cached && fresh(cached)) return cached;
  const candidates = [...globalConfigFiles(), repoConfigFile(cwd)].filter((f): f is string => !!f);
  const before = candidates.map((f): [string, number] => [f, mtimeOf(f)]);
  const listed = await spawnGit(
    cwd,
    ['config', '--list', '--show-origin', '-z'],
    undefined,
    configEnv([], !router?.claims(cwd)),
  );
  const names = new Map<string, Set<string>>();
  const checkin: CheckinConfig = {};
  const stamps = new Map(before);
  // -z output: "file:<origin>\0<key>\n<value>\0" per entry ("<key>\0" for a bare boolean).
  const parts = listed.stdout.split('\0');
  for (let i = 0; i + 1 < parts.length; i += 2) {
    const origin = parts[i]!;
    const entry = parts[i + 1]!;
    const nl = entry.indexOf('\n');
    const key = nl < 0 ? entry : entry.slice(0, nl);
    if (origin.startsWith('file:')) {
      const file = path.resolve(cwd, origin.slice('file:'.length));
      if (!stamps.has(file)) stamps.set(file, mtimeOf(file));
    }
    const setting = CHECKIN_KEYS[key.toLowerCase()];
    if (setting) checkin[setting] = nl < 0 ? 'true' : entry.slice(nl + 1);
    const m = DRIVER_KEY.exec(key);
    if (!m) continue;
    const section = m[1]!.toLowerCase();
    if (!names.has(section)) names.set(section, new Set());
    names.get(section)!.add(m[2]!);
  }
  const pairs: [string, string][] = [];
  for (const name of names.get('filter') ?? []) {
    pairs.push(
      [`filter.${name}.clean`, ''],
      [`filter.${name}.smudge`, ''],
      [`filter.${name}.process`, ''],
      [`filter.${name}.required`, 'false'],
    );
  }
  for (const name of names.get('diff') ?? []) pairs.push([`diff.${name}.textconv`, ''], [`diff.${name}.command`, '']);
  for (const name of names.get('merge') ?? []) pairs.push([`merge.${name}.driver`, '']);
  const entry: DriverCache = { pairs, checkin: listed.exitCode === 0 ? checkin : undefined, stamps: [...stamps] };
  if (listed.exitCode === 0) {
    if (driverCache.size >= DRIVER_CACHE_MAX) driverCache.delete(driverCache.keys().next().value!);
    driverCache.set(cwd, entry);
  }
  return entry;
}

async function driverOverrides(cwd: string): Promise<[string, string][]> {
  return (await repoConfig(cwd)).pairs;
}

/** core.autocrlf, core.filemode and core.symlinks as git would read them in cwd (cached with the drivers); undefined if unreadable. */
export async function checkinConfig(cwd: string): Promise<CheckinConfig | undefined> {
  return (await repoConfig(cwd)).checkin;
}

/**
 * Command-line-scope config as environment (GIT_CONFIG_COUNT/KEY_n/VALUE_n: unlike `-c k=v`, a
 * driver name holding "=" cannot slip through): SAFE_GIT_CONFIG, the remotes' credentials
 * (remoteForGit) and the repo's drivers emptied.
 */
function configEnv(pairs: [string, string][], withCredentials = true): Record<string, string> {
  const rewrites = [...(withCredentials ? credentialRewrites : [])].map(([anonymous, url]): [string, string] => [
    `url.${url}.insteadOf`,
    anonymous,
  ]);
  const all: [string, string][] = [...SAFE_PAIRS, ...rewrites, ...pairs];
  const env: Record<string, string> = { GIT_CONFIG_COUNT: String(all.length) };
  all.forEach(([key, value], i) => {
    env[`GIT_CONFIG_KEY_${i}`] = key;
    env[`GIT_CONFIG_VALUE_${i}`] = value;
  });
  return env;
}

/**
 * Where git runs when cwd lies in a run's tree: worker/tree/registry.ts installs a router that
 * sends such calls to the tree's sandboxed process. Calls that need the network (or only the object
 * store: fast-import) run here, in the common git dir, where no file the agent wrote is read.
 */
export interface GitRouter {
  claims(cwd: string): string | undefined;
  run(
    root: string,
    cwd: string,
    argv: string[],
    input: string | Buffer | undefined,
    env: Record<string, string>,
    timeoutMs?: number,
  ): Promise<GitResult>;
}
let router: GitRouter | undefined;

export function routeGitThrough(r: GitRouter): void {
  router = r;
}

/** Subcommands that never read the worktree; run in the common git dir (the network ones must). */
const OUTSIDE_TREE = new Set(['push', 'fetch', 'clone', 'ls-remote', 'fast-import']);

/** The subcommand of a git argv (past `-c k=v` and `-C dir`). */
export function gitSubcommand(argv: string[]): string | undefined {
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '-c' || argv[i] === '-C') i++;
    else if (!argv[i]!.startsWith('-')) return argv[i];
  }
  return undefined;
}

/** Where a git call really runs: [the tree root serving it, or undefined for here; the cwd]. */
function placeOf(cwd: string, argv: string[]): [string | undefined, string] {
  const root = router?.claims(cwd);
  if (!root) return [undefined, cwd];
  if (OUTSIDE_TREE.has(gitSubcommand(argv) ?? '')) return [undefined, commonDirOnDisk(cwd) ?? cwd];
  return [root, cwd];
}

/** The environment every worker git gets in cwd (GIT_ENV plus the safe config); for other spawners of git. */
export async function safeGitEnv(cwd: string): Promise<NodeJS.ProcessEnv> {
  return { ...GIT_ENV, ...configEnv(await driverOverrides(cwd)) };
}

/** A tree process gets no credential: it has no network, and holds no secret. */
function inTree(cwd: string, argv: string[]): boolean {
  return placeOf(cwd, argv)[0] !== undefined;
}

export interface GitResult {
  stdout: string;
  stderr: string;
  exitCode: number;
}

/** Keys of GIT_ENV that describe this host's process, not git: a tree process has its own. */
const HOST_ONLY = new Set(['PATH', 'HOME']);

function spawnGit(
  cwd: string,
  argv: string[],
  input: string | Buffer | undefined,
  env: NodeJS.ProcessEnv,
  timeoutMs?: number,
): Promise<GitResult> {
  const [root, where] = placeOf(cwd, argv);
  if (root) {
    const inside: Record<string, string> = {};
    for (const [k, v] of Object.entries({ ...GIT_ENV, ...env }))
      if (v !== undefined && !HOST_ONLY.has(k)) inside[k] = v;
    return router!.run(root, where, argv, input, inside, timeoutMs);
  }
  cwd = where;
  return new Promise((resolve, reject) => {
    const child = spawn('git', argv, { cwd, env: { ...GIT_ENV, ...env }, stdio: ['pipe', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    // A remote that accepts the connection and never answers would hold git (and the run) forever.
    let timedOut = false;
    const timer =
      timeoutMs === undefined
        ? undefined
        : setTimeout(() => {
            timedOut = true;
            child.kill('SIGKILL');
          }, timeoutMs);
    child.stdout.on('data', (d: Buffer) => out.push(d));
    child.stderr.on('data', (d: Buffer) => err.push(d));
    child.on('error', reject);
    child.stdin.on('error', () => {}); // git may exit before reading all input; its exit code tells
    child.on('close', (code) => {
      clearTimeout(timer);
      const stderr =
        Buffer.concat(err).toString('utf8') + (timedOut ? `\nno answer within ${timeoutMs} ms: stopped` : '');
      resolve({ stdout: Buffer.concat(out).toString('utf8'), stderr, exitCode: timedOut ? -1 : (code ?? -1) });
    });
    child.stdin.end(input ?? '');
  });
}

export async function runGit(
  cwd: string,
  args: string[],
  options: { input?: string | Buffer; env?: NodeJS.ProcessEnv; allowExitCodes?: number[]; timeoutMs?: number } = {},
): Promise<GitResult> {
  const env = { ...options.env, ...configEnv(await driverOverrides(cwd), !inTree(cwd, args)) };
  const result = await spawnGit(cwd, args, options.input, env, options.timeoutMs);
  if (result.exitCode === 0 || options.allowExitCodes?.includes(result.exitCode)) return result;
  throw new GitError(args, result.exitCode, result.stderr);
}

export async function git(cwd: string, ...args: string[]): Promise<string> {
  return (await runGit(cwd, args)).stdout.trim();
}

/** The commit a ref or oid resolves to, or undefined. */
export async function resolveCommit(cwd: string, ref: string): Promise<string | undefined> {
  const r = await runGit(cwd, ['rev-parse', '--verify', '--quiet', `${ref}^{commit}`], { allowExitCodes: [1, 128] });
  return r.exitCode === 0 ? r.stdout.trim() : undefined;
}
