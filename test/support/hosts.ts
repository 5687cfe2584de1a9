// Many "hosts" on this machine: each a clone of one bare remote served by a real
// `git daemon` on 127.0.0.1 (its WORKER_REPO_ROOT), its own WORKER_WORKTREE_BASE and WORKER_HOST_ID;
// one Postgres for all (the scenario's). And the checks every many-host test makes of a finished
// run against the remote: every row's commit reachable from the run's branch there, every note there.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtemp, realpath, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { parseConfig, type Config } from '../../core/config.ts';
import { runNotesRef } from '../../worker/remote/push.ts';
import { checkRunIntegrity } from '../../operator/integrity.ts';
import { startGitDaemon, type GitDaemon } from '../../testbed/git-daemon.ts';
import { git } from './git.ts';
import type { Scenario } from './scenario.ts';
import type { Child } from './child.ts';

/**
 * The remote standby off: a resume then always fetches at the claim, which these tests assert
 * (test/remote-standby.test.ts and the load test turn it on).
 */
export const NO_STANDBY = { WORKER_REMOTE_STANDBY_MS: '0' };

export interface Host {
  name: string;
  /** WORKER_HOST_ID */
  id: string;
  repo: string;
  worktreeBase: string;
  env: Record<string, string>;
}

export interface Hosts {
  root: string;
  remoteDir: string;
  remoteUrl: string;
  daemon: GitDaemon;
  byName: Record<string, Host>;
  /** The host whose WORKER_HOST_ID is `id`. */
  byId(id: string): Host;
  /** parseConfig of the scenario's environment as seen on `host`. */
  config(host: Host): Config;
  close(): Promise<void>;
}

/** A worker process on `host` (its environment, then `extra`), kept in `children` for stopProcesses. */
export function spawnOnHost(s: Scenario, children: Child[], host: Host, extra: Record<string, string> = {}): Child {
  const w = s.spawnWorker({ ...host.env, ...extra });
  children.push(w);
  return w;
}

/** A job that leaves repoPath out: each host serves it from its own WORKER_REPO_ROOT. */
export const dispatchToHosts = (s: Scenario) => s.dispatch({ repoPath: undefined });

/** A bare remote made from `sourceRepo`, served by git daemon, and one clone of it per host name. */
export async function setUpHosts(s: Scenario, names: string[]): Promise<Hosts> {
  const root = await realpath(await mkdtemp(path.join(os.tmpdir(), 'echodo-hosts-')));
  const remoteDir = path.join(root, 'remote.git');
  await git(root, 'clone', '-q', '--bare', s.repo, remoteDir);
  const daemon = await startGitDaemon(root);
  const remoteUrl = daemon.url('remote.git');
  const byName: Record<string, Host> = {};
  for (const name of names) {
    const repo = path.join(root, `host-${name}`);
    await git(root, 'clone', '-q', remoteUrl, repo); // over the real transport
    const worktreeBase = path.join(root, `worktrees-${name}`);
    const id = `host-${name}`;
    byName[name] = {
      name,
      id,
      repo,
      worktreeBase,
      env: {
        WORKER_REPO_ROOT: repo,
        WORKER_WORKTREE_BASE: worktreeBase,
        WORKER_HOST_ID: id,
        WORKER_CHECKPOINT_REMOTE: remoteUrl,
        ...NO_STANDBY,
      },
    };
  }
  return {
    root,
    remoteDir,
    remoteUrl,
    daemon,
    byName,
    byId(id) {
      const host = Object.values(byName).find((h) => h.id === id);
      if (!host) throw new Error(`no host with WORKER_HOST_ID ${id}`);
      return host;
    },
    config: (host) => parseConfig({ ...s.env, ...host.env }),
    async close() {
      await daemon.stop();
      await rm(root, { recursive: true, force: true });
    },
  };
}

/**
 * The repository moves on after the other hosts cloned it: `count` commits on the remote's main,
 * pulled by `repo` only (the last one restores the tree, so runs still end at the same tree).
 */
export async function moveOn(hosts: Pick<Hosts, 'root' | 'remoteUrl'>, repo: string, count: number): Promise<void> {
  const mover = path.join(hosts.root, `mover-${Date.now()}`);
  await git(hosts.root, 'clone', '-q', hosts.remoteUrl, mover);
  const script: string[] = [];
  for (let i = 1; i <= count; i++) {
    const msg = `move on ${i}`;
    script.push(
      'commit refs/heads/main',
      `committer Mover <mover@echodo.invalid> ${1_700_000_000 + i} +0000`,
      `data ${msg.length}`,
      msg,
    );
    if (i === 1) script.push('from refs/heads/main^0');
    if (i < count) script.push('M 100644 inline moving.txt', `data ${String(i).length + 1}`, `${i}`);
    else script.push('D moving.txt');
    script.push('');
  }
  execFileSync('git', ['fast-import', '--quiet'], { cwd: mover, input: script.join('\n') + '\n' });
  await git(mover, 'push', '-q', 'origin', 'main');
  await git(repo, 'fetch', '-q', 'origin');
  await git(repo, 'merge', '-q', '--ff-only', 'origin/main');
}

/** Each commit on the remote's copy of `branch`, with its note in `notesRef` there (or ''). */
/** What the checks below need of a set of hosts (any transport). */
export type HostsSeen = Pick<Hosts, 'remoteDir' | 'byId' | 'config'>;

async function remoteLog(hosts: HostsSeen, branch: string, notesRef: string): Promise<Map<string, string>> {
  const out = await git(hosts.remoteDir, 'log', `--notes=${notesRef}`, '--format=%H%x00%N%x01', `refs/heads/${branch}`);
  const notes = new Map<string, string>();
  for (const entry of out.split('\x01')) {
    const [oid, note] = entry.trim().split('\x00');
    if (oid) notes.set(oid, (note ?? '').trim());
  }
  return notes;
}

/**
 * A finished run as the many-host tests require it: completed, seqs 1..rounds without a gap or a
 * duplicate, the final tree `baselineTree` on the finishing host and on the remote, the worktree
 * under the finishing host's own base, every row's commit reachable from the run's branch on the
 * remote with its note (seq and hash) in the run's notes ref there, integrity intact on that host.
 * Returns the host that finished it.
 */
export async function assertFinishedOnRemote(
  s: Scenario,
  hosts: HostsSeen,
  agentRunId: string,
  rounds: number,
  baselineTree: string,
  context = '',
): Promise<Host> {
  const run = await s.run(agentRunId);
  assert.equal(
    run.status,
    'completed',
    `run ${agentRunId}: ${run.failure_reason ?? ''}${context ? `\n${context}` : ''}`,
  );
  const host = hosts.byId(run.host_id);
  assert.ok(
    run.worktree_path.startsWith(host.worktreeBase + path.sep),
    `run ${agentRunId} on ${host.id} records a worktree under its own base: ${run.worktree_path}`,
  );
  const rows = await s.checkpoints(agentRunId);
  assert.deepEqual(
    rows.map((r) => r.checkpoint_seq),
    Array.from({ length: rounds }, (_, i) => i + 1),
    `seqs of ${agentRunId}: 1..n, no gap or duplicate`,
  );
  assert.equal(
    await git(host.repo, 'rev-parse', `refs/heads/${run.branch}^{tree}`),
    baselineTree,
    `final tree of ${agentRunId} on ${host.id}`,
  );
  assert.equal(
    await git(hosts.remoteDir, 'rev-parse', `refs/heads/${run.branch}^{tree}`),
    baselineTree,
    `final tree of ${agentRunId} on the remote`,
  );
  const onRemote = await remoteLog(hosts, run.branch, runNotesRef(s.workspaceId, agentRunId));
  for (const row of rows) {
    const note = onRemote.get(row.commit_oid);
    assert.ok(
      note !== undefined,
      `seq ${row.checkpoint_seq} of ${agentRunId}: commit ${row.commit_oid} reachable from the remote branch`,
    );
    assert.ok(note, `seq ${row.checkpoint_seq} of ${agentRunId}: its note is on the remote`);
    const parsed = JSON.parse(note) as { checkpointSeq: number; hash: string };
    assert.equal(parsed.checkpointSeq, row.checkpoint_seq, `remote note of ${agentRunId} seq ${row.checkpoint_seq}`);
    assert.equal(parsed.hash, row.hash, `remote note hash of ${agentRunId} seq ${row.checkpoint_seq}`);
  }
  const report = await checkRunIntegrity(s.t.db, hosts.config(host), s.workspaceId, agentRunId);
  assert.deepEqual(report?.findings, [], `integrity of ${agentRunId} on ${host.id}`);
  return host;
}

/**
 * Lets worker `w` finish the run (completed or failed), sweeping as the stall detector would
 * (another host's dead worker leaves a lease to expire), then (after `beforeStop`: e.g. a scrape) stops it.
 */
export async function finishWith(
  s: Scenario,
  w: Child,
  agentRunId: string,
  beforeStop?: () => Promise<void>,
): Promise<void> {
  const deadline = Date.now() + 180_000;
  for (;;) {
    await s.sweep();
    const run = await s.run(agentRunId);
    if (run.status === 'completed' || run.status === 'failed') break;
    if (Date.now() > deadline)
      throw new Error(`run ${agentRunId} not finished: ${run.status}\n${w.lines.slice(-30).join('\n')}`);
    await new Promise((r) => setTimeout(r, 200));
  }
  try {
    await beforeStop?.();
  } finally {
    await w.stop('SIGTERM', 8000);
  }
}

/** Kills every process a test started; ECHODO_DUMP_WORKERS=file keeps their logs, in spawn order, for debugging. */
export async function stopProcesses(children: Child[]): Promise<void> {
  await Promise.all(children.map((c) => c.stop('SIGKILL', 100)));
  if (process.env.ECHODO_DUMP_WORKERS) {
    await writeFile(
      process.env.ECHODO_DUMP_WORKERS,
      children.map((c, i) => `=== process ${i}\n${c.output()}`).join('\n'),
    );
  }
}
