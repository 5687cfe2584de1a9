// Two checkpoint designs of other coding agents, measured on the same change as ours and the
// floor (the floor worktree, right after its bare commit of the round's change):
//   Cline-style: a shadow git dir whose core.worktree is the working folder; a checkpoint is
//     `git add -A` + `git commit` there (Cline adds `.` with --ignore-errors and commits with
//     --allow-empty --no-verify; the same thing for a tree without nested repositories).
//   OpenCode-style: a snapshot git dir used with GIT_DIR / GIT_WORK_TREE on the working folder;
//     a snapshot is `git add .` + `git write-tree` (a tree, no commit).
// Each shadow dir is seeded from the repo's pack (hardlinked) and an index read from the tip
// and refreshed, so it starts in the steady state of a tool that has already taken its first
// snapshot (not re-hashing 250k files, which their first checkpoint does), and packed, which
// is kinder than their loose objects.
import { link, mkdir, readdir } from 'node:fs/promises';
import path from 'node:path';
import { runGit } from '../worker/git/run-git.ts';
import type { Samples } from './stats.ts';

export interface ShadowRepo {
  /** The shadow git dir. */
  gitDir: string;
  /** The working folder it snapshots. */
  workTree: string;
}

/** A shadow git dir over `workTree`, holding `repo`'s objects and an index of `repo`'s main. */
async function seedShadow(repo: string, gitDir: string, workTree: string): Promise<ShadowRepo> {
  await mkdir(gitDir, { recursive: true });
  await runGit(gitDir, ['init', '-q', '--bare', '-b', 'main']);
  await runGit(gitDir, ['config', 'core.bare', 'false']);
  // Packs are immutable: a hardlink is a copy that costs nothing.
  const packs = path.join(repo, '.git', 'objects', 'pack');
  for (const name of await readdir(packs)) {
    if (name.endsWith('.pack') || name.endsWith('.idx'))
      await link(path.join(packs, name), path.join(gitDir, 'objects', 'pack', name));
  }
  const tip = (await runGit(repo, ['rev-parse', 'main'])).stdout.trim();
  const env = { GIT_DIR: gitDir, GIT_WORK_TREE: workTree };
  await runGit(workTree, ['read-tree', tip], { env });
  // Stat data for every entry; the files that differ from main stay modified for the first add.
  await runGit(workTree, ['update-index', '-q', '--refresh'], { env, allowExitCodes: [1] });
  await runGit(workTree, ['update-ref', 'HEAD', tip], { env });
  // No auto gc in the middle of a sample (the same setting the bench gives our repo).
  await runGit(gitDir, ['config', 'gc.auto', '0']);
  return { gitDir, workTree };
}

export interface GitPeers {
  cline: ShadowRepo;
  opencode: ShadowRepo;
}

export async function createGitPeers(repo: string, workTree: string, dir: string): Promise<GitPeers> {
  const cline = await seedShadow(repo, path.join(dir, 'cline-shadow.git'), workTree);
  // Cline points the shadow at the workspace with core.worktree and runs plain git commands.
  await runGit(cline.gitDir, ['config', 'core.worktree', workTree]);
  const opencode = await seedShadow(repo, path.join(dir, 'opencode-snapshot.git'), workTree);
  return { cline, opencode };
}

/** One Cline-style checkpoint: `git add -A` + `git commit` in the shadow dir. */
export async function clineCheckpoint(peer: ShadowRepo): Promise<void> {
  const env = { GIT_DIR: peer.gitDir };
  await runGit(peer.workTree, ['add', '-A', '--ignore-errors', '.'], { env });
  await runGit(peer.workTree, ['commit', '-q', '--allow-empty', '--no-verify', '-m', 'checkpoint'], { env });
}

/** One OpenCode-style snapshot: `git add .` + `git write-tree` with GIT_DIR / GIT_WORK_TREE. */
export async function opencodeSnapshot(peer: ShadowRepo): Promise<string> {
  const env = { GIT_DIR: peer.gitDir, GIT_WORK_TREE: peer.workTree };
  await runGit(peer.workTree, ['add', '.'], { env });
  return (await runGit(peer.workTree, ['write-tree'], { env })).stdout.trim();
}

/** Both peers on the change now in their work tree, timed under `${key}.cline` / `${key}.opencode`. */
export async function measureGitPeers(peers: GitPeers, s: Samples, key: string, record = true): Promise<void> {
  if (!record) {
    await clineCheckpoint(peers.cline);
    await opencodeSnapshot(peers.opencode);
    return;
  }
  await s.time(`${key}.cline`, () => clineCheckpoint(peers.cline));
  await s.time(`${key}.opencode`, () => opencodeSnapshot(peers.opencode));
}
