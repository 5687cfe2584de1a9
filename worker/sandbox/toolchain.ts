// What of the host a sandboxed command sees, read-only: /usr (and the /bin, /lib… links or folders
// next to it), the install prefixes of node, npm, pnpm and git when they live outside /usr, and a
// handful of /etc files. Nothing else of the host: inside, uid 65534 maps to the worker's uid
// outside, so every root-owned file that were mounted would be readable as its owner.
import { existsSync, lstatSync, readlinkSync, realpathSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** Static files bound over /etc: a passwd/group naming uid 65534, a localhost-only hosts file. */
const SANDBOX_ETC = path.join(path.dirname(fileURLToPath(import.meta.url)), 'etc');
const TOP_LEVEL = ['/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32'];
// Host /etc entries a toolchain needs: the loader cache (multiarch libraries are found through
// it) and Debian's alternatives links (/usr/bin/awk → /etc/alternatives/awk). Nothing secret.
const HOST_ETC = ['/etc/ld.so.cache', '/etc/ld.so.conf', '/etc/alternatives', '/etc/localtime'];
const TOOLS = ['node', 'npm', 'npx', 'pnpm', 'git', 'sh'];

export type Mount =
  { kind: 'ro-bind'; source: string; dest: string } | { kind: 'symlink'; target: string; dest: string };

export interface Toolchain {
  /** Read-only mounts and links, in order. */
  mounts: Mount[];
  /** PATH inside the sandbox: only folders that are mounted. */
  path: string;
}

function isUnder(child: string, parent: string): boolean {
  const rel = path.relative(parent, child);
  return rel === '' || (!rel.startsWith('..') && !path.isAbsolute(rel));
}

/** The folder to mount for a program found in `dir`: its install prefix when dir is a bin/ folder. */
function prefixOf(dir: string): string {
  return path.basename(dir) === 'bin' ? path.dirname(dir) : dir;
}

function findOnPath(name: string, searchPath: string): string | null {
  for (const dir of searchPath.split(path.delimiter)) {
    if (!path.isAbsolute(dir)) continue;
    const candidate = path.join(dir, name);
    if (existsSync(candidate)) return candidate;
  }
  return null;
}

/**
 * The toolchain mounts for this host. `forbidden` are folders that must never become visible
 * (ECHODO_HOME, the worktree base, the repo root): a tool prefix that contains or lies in one of
 * them is left out (the tool is then missing inside, which fails closed).
 */
export function discoverToolchain(
  options: { execPath?: string; searchPath?: string; forbidden?: string[] } = {},
): Toolchain {
  const execPath = options.execPath ?? process.execPath;
  const searchPath = options.searchPath ?? process.env.PATH ?? '';
  const forbidden = (options.forbidden ?? []).map((p) => path.resolve(p));
  const mounts: Mount[] = [{ kind: 'ro-bind', source: '/usr', dest: '/usr' }];
  for (const top of TOP_LEVEL) {
    if (!existsSync(top)) continue;
    const st = lstatSync(top);
    if (st.isSymbolicLink()) mounts.push({ kind: 'symlink', target: readlinkSync(top), dest: top });
    else if (st.isDirectory()) mounts.push({ kind: 'ro-bind', source: top, dest: top });
  }

  const pathDirs = [path.dirname(execPath)];
  const prefixes = new Set<string>([prefixOf(path.dirname(realpathSync(execPath)))]);
  for (const tool of TOOLS) {
    const found = findOnPath(tool, searchPath);
    if (!found) continue;
    pathDirs.push(path.dirname(found));
    prefixes.add(prefixOf(path.dirname(found)));
    prefixes.add(prefixOf(path.dirname(realpathSync(found))));
  }
  const covered = (p: string) => mounts.some((m) => m.kind === 'ro-bind' && isUnder(p, m.source));
  for (const prefix of [...prefixes].sort()) {
    if (prefix === '/' || covered(prefix)) continue;
    if (forbidden.some((f) => isUnder(prefix, f) || isUnder(f, prefix))) continue;
    mounts.push({ kind: 'ro-bind', source: prefix, dest: prefix });
  }

  for (const file of HOST_ETC) if (existsSync(file)) mounts.push({ kind: 'ro-bind', source: file, dest: file });
  for (const file of ['passwd', 'group', 'hosts', 'nsswitch.conf']) {
    mounts.push({ kind: 'ro-bind', source: path.join(SANDBOX_ETC, file), dest: path.join('/etc', file) });
  }

  const insidePath = [...new Set([...pathDirs, '/usr/local/bin', '/usr/bin', '/bin'])].filter(
    (d) => covered(d) || TOP_LEVEL.includes(d),
  );
  return { mounts, path: insidePath.join(path.delimiter) };
}
