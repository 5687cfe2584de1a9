// A thin, fast git runner for the hot path (one spawn per call, stdin supported).
// simple-git serves the friendlier worktree operations; this serves plumbing.
import { spawn } from 'node:child_process';

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
  GIT_AUTHOR_NAME: 'echodo-worker',
  GIT_AUTHOR_EMAIL: 'echodo-worker@localhost',
  GIT_COMMITTER_NAME: 'echodo-worker',
  GIT_COMMITTER_EMAIL: 'echodo-worker@localhost',
};

export interface GitResult {
  stdout: string;
  stderr: string;
  exitCode: number;
}

export function runGit(
  cwd: string,
  args: string[],
  options: { input?: string | Buffer; env?: NodeJS.ProcessEnv; allowExitCodes?: number[] } = {},
): Promise<GitResult> {
  return new Promise((resolve, reject) => {
    const child = spawn('git', args, { cwd, env: { ...GIT_ENV, ...options.env }, stdio: ['pipe', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (d: Buffer) => out.push(d));
    child.stderr.on('data', (d: Buffer) => err.push(d));
    child.on('error', reject);
    child.stdin.on('error', () => {}); // git may exit before reading all input; its exit code tells
    child.on('close', (code) => {
      const result = { stdout: Buffer.concat(out).toString('utf8'), stderr: Buffer.concat(err).toString('utf8'), exitCode: code ?? -1 };
      if (code === 0 || options.allowExitCodes?.includes(code ?? -1)) resolve(result);
      else reject(new GitError(args, code, result.stderr));
    });
    child.stdin.end(options.input ?? '');
  });
}

export async function git(cwd: string, ...args: string[]): Promise<string> {
  return (await runGit(cwd, args)).stdout.trim();
}

/** The commit a ref or oid resolves to, or undefined. */
export async function resolveCommit(cwd: string, ref: string): Promise<string | undefined> {
  const r = await runGit(cwd, ['rev-parse', '--verify', '--quiet', `${ref}^{commit}`], { allowExitCodes: [1, 128] });
  return r.exitCode === 0 ? r.stdout.trim() : undefined;
}
