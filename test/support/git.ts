// Real git repositories for tests, in temp directories.
import { execFile } from 'node:child_process';
import { mkdtemp, mkdir, realpath, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

const execFileAsync = promisify(execFile);

/** Runs git in `cwd`; resolves with its stdout (trimmed of the final newline). */
export async function git(cwd: string, ...args: string[]): Promise<string> {
  try {
    const { stdout } = await execFileAsync('git', args, { cwd, maxBuffer: 64 * 1024 * 1024 });
    return stdout.replace(/\n$/, '');
  } catch (err) {
    const e = err as Error & { stderr?: string };
    throw new Error(`git ${args.join(' ')} (in ${cwd}) failed: ${e.stderr?.trim() || e.message}`);
  }
}

/** A fresh repository on branch `main` (or opts.branch) with `files` committed as "initial". */
export async function makeRepo(files: Record<string, string>, opts: { branch?: string } = {}): Promise<string> {
  const dir = await realpath(await mkdtemp(path.join(os.tmpdir(), 'echodo-repo-')));
  await git(dir, 'init', '-q', '-b', opts.branch ?? 'main');
  await git(dir, 'config', 'user.name', 'Echodo Test');
  await git(dir, 'config', 'user.email', 'test@echodo.invalid');
  await git(dir, 'config', 'commit.gpgsign', 'false');
  for (const [file, content] of Object.entries(files)) {
    const target = path.join(dir, file);
    await mkdir(path.dirname(target), { recursive: true });
    await writeFile(target, content);
  }
  await git(dir, 'add', '-A');
  await git(dir, 'commit', '-q', '--allow-empty', '-m', 'initial');
  return dir;
}
