// A partial clone (a host that had no copy of the repository fetched one without blobs) fetches a
// blob the first time git reads it. Inside a tree process there is no network, so before git
// checks files out there, the blobs it will need are fetched here, in the common git dir, the
// way git's own lazy fetch does it: one `fetch --stdin` of the missing ids from the promisor remote.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { commonDirOnDisk, runGit } from '../git/run-git.ts';

/** Subcommands that write files from blobs into the tree. */
const CHECKS_OUT = new Set(['read-tree', 'checkout', 'checkout-index', 'reset', 'restore', 'switch', 'stash']);

/** The promisor remote of a partial clone, from its config; undefined for an ordinary repository. */
function promisorRemote(commonDir: string): string | undefined {
  let text: string;
  try {
    text = readFileSync(path.join(commonDir, 'config'), 'utf8');
  } catch {
    return undefined;
  }
  let section: string | undefined;
  for (const line of text.split('\n')) {
    const header = /^\s*\[remote\s+"([^"]+)"\]/.exec(line);
    if (header) section = header[1];
    else if (/^\s*\[/.test(line)) section = undefined;
    else if (section && /^\s*promisor\s*=\s*true\s*$/i.test(line)) return section;
  }
  return undefined;
}

/** Fetches what `argv`, run in the tree at root, would need from the promisor remote. */
export async function hydrateFor(root: string, argv: string[], subcommand: string | undefined): Promise<void> {
  if (!subcommand || !CHECKS_OUT.has(subcommand)) return;
  const commonDir = commonDirOnDisk(root);
  const remote = commonDir && promisorRemote(commonDir);
  if (!commonDir || !remote) return;
  const gitDir = ['--git-dir', readGitDir(root) ?? commonDir];
  const operands = argv.slice(argv.indexOf(subcommand) + 1).filter((a) => !a.startsWith('-') && a !== '--');
  const revs: string[] = [];
  for (const rev of ['HEAD', ...operands]) {
    const r = await runGit(commonDir, [...gitDir, 'rev-parse', '--verify', '--quiet', `${rev}^{tree}`], {
      allowExitCodes: [1, 128],
    });
    if (r.exitCode === 0) revs.push(r.stdout.trim());
  }
  if (!revs.length) return;
  const listed = await runGit(commonDir, [...gitDir, 'rev-list', '--objects', '--missing=print', ...revs], {
    allowExitCodes: [128],
  });
  const missing = listed.stdout
    .split('\n')
    .filter((l) => l.startsWith('?'))
    .map((l) => l.slice(1));
  if (!missing.length) return;
  const fetch = ['-c', 'fetch.negotiationAlgorithm=noop', 'fetch', remote, '--no-tags', '--no-write-fetch-head'];
  await runGit(commonDir, [...fetch, '--recurse-submodules=no', '--filter=blob:none', '--stdin'], {
    input: `${missing.join('\n')}\n`,
  });
}

/** The worktree's own git dir (its HEAD), read from the `.git` pointer the sandboxes keep read-only. */
function readGitDir(root: string): string | undefined {
  try {
    const pointer = readFileSync(path.join(root, '.git'), 'utf8')
      .trim()
      .replace(/^gitdir:\s*/, '');
    return path.resolve(root, pointer);
  } catch {
    return undefined; // a folder .git (a plain repository): the common dir is its git dir
  }
}
