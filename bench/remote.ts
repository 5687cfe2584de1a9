// Benchmark 7: what WORKER_CHECKPOINT_REMOTE costs a checkpoint, and what a
// resume on another host costs next to cloning. The remote is a bare repository served on
// 127.0.0.1, never a file path: by a real `git daemon` (git://, the default), or with
// --remote-transport=http by git's smart HTTP (`git http-backend` behind a loopback HTTP server:
// the transport hosted remotes speak). The clones it is compared with use the same transport.
// Checkpoint cost: two runs on the same repository ("host A"), one whose CheckpointWriter has no
// remote and one built as worker/run/execute.ts builds it with the remote (RemotePusher); samples alternate
// between them, each a round touching the same paths. What a checkpoint costs the round is what
// the session waits for: write(), then, after the model's next call (MODEL_MS), readyForTools()
// before the next tool call. With the remote the push and the row run behind the round, so the
// time until the checkpoint counted is reported beside it. The cross-host resume is in remote-resume.ts.
import { mkdir } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import path from 'node:path';
import { objectStoreBytes } from '../worker/remote/push.ts';
import { CheckpointWriter } from '../worker/checkpoints/writer.ts';
import { runGit } from '../worker/git/run-git.ts';
import { startGitDaemon } from '../testbed/git-daemon.ts';
import { startGitHttpServer } from '../testbed/git-http.ts';
import type { BenchEnv } from './env.ts';
import { createRunFixture } from './fixture.ts';
import { remoteWriter, type RemoteSetup } from './remote-writer.ts';
import { measureCrossHostResume } from './remote-resume.ts';
import type { RemoteFigure, RemoteTransport } from './remote-results.ts';
import { ensurePristineRepo, spreadPaths, workingRepo } from './repos.ts';
import { ratio, round, Samples } from './stats.ts';

export const REMOTE_TOUCHED = 10;
/**
 * Cross-host resume samples per size, at most: each sample is a resume plus three clones of the
 * repository, a minute or more at 50k files on a loaded 2-core machine.
 */
const RESUME_SAMPLES_AT: Record<number, number> = { 50_000: 5 };

/** What serves the remotes: its URL for a repository under the base path. */
interface RemoteServer {
  url(name: string): string;
  stop(): Promise<void>;
}

async function setUp(
  env: BenchEnv,
  server: RemoteServer,
  base: string,
  files: number,
  log: (line: string) => void,
): Promise<RemoteSetup> {
  const pristine = await ensurePristineRepo(files, log);
  const name = `files-${files}.git`;
  const remoteDir = path.join(base, name);
  await runGit(base, ['clone', '-q', '--bare', pristine, remoteDir]);
  // A partial clone (ensureLocalRepo's, and the baseline's) needs the server to accept filters.
  await runGit(remoteDir, ['config', 'uploadpack.allowFilter', 'true']);
  const repoPackedBytes = await objectStoreBytes(remoteDir);
  const hostA = await workingRepo(pristine, path.join(env.workDir, 'remote', `host-a-${files}`));
  // No auto gc in the middle of a sample (as freshRepo in scripts/bench.ts).
  await runGit(hostA, ['config', 'gc.auto', '0']);
  return { files, pristine, remoteDir, url: server.url(name), repoPackedBytes, hostA };
}

/**
 * The model's call between two rounds, as short as a tool-using model's round trip gets (the
 * session starts it as soon as write() returns). The work behind the round runs during it.
 */
export const MODEL_MS = 1000;

/**
 * One checkpoint as the session sees it: `${key}` is what the round waits for (write(), then what
 * is left of readyForTools() after the model call), `${key}Counted` the time until the checkpoint
 * counted and its index was in step.
 */
async function timedCheckpoint(s: Samples, key: string, writer: CheckpointWriter): Promise<void> {
  const start = performance.now();
  await writer.write();
  const returned = performance.now();
  const counted = writer.readyForTools().then(() => performance.now());
  await sleep(MODEL_MS);
  const toolCallAt = performance.now();
  const countedAt = await counted;
  s.add(key, returned - start + Math.max(0, countedAt - toolCallAt));
  s.add(`${key}Counted`, countedAt - start);
}

/** `samples` checkpoints of each kind, alternating, after the same kind of round. */
async function measureCheckpoints(
  env: BenchEnv,
  setup: RemoteSetup,
  samples: number,
  s: Samples,
  key: string,
): Promise<void> {
  const off = await createRunFixture(env, setup.hostA);
  const onFixture = await createRunFixture(env, setup.hostA);
  let pushing = false;
  const on = remoteWriter(env, onFixture, setup.url, (push) => (pushing ? s.time(`${key}.push`, push) : push()));
  const paths = spreadPaths(setup.files, REMOTE_TOUCHED);
  for (let i = 0; i < 3; i++) {
    // Warm-up, not recorded: the first push also sends the run's notes ref for the first time.
    await off.playRound(paths);
    await off.writer.write();
    await onFixture.playRound(paths);
    await on.write();
  }
  await on.readyForTools();
  pushing = true;
  for (let i = 0; i < samples; i++) {
    await off.playRound(paths);
    await timedCheckpoint(s, `${key}.off`, off.writer);
    await onFixture.playRound(paths);
    await timedCheckpoint(s, `${key}.on`, on);
  }
  await off.writer.settleNotes();
  await on.settleNotes();
}

export async function measureRemote(
  env: BenchEnv,
  plan: { sizes: number[]; samples: number; remoteResumeSamples: number; transport: RemoteTransport },
  s: Samples,
  log: (line: string) => void,
  since: () => string,
): Promise<RemoteFigure[]> {
  const base = path.join(env.workDir, 'remotes');
  await mkdir(base, { recursive: true });
  const server: RemoteServer = plan.transport === 'http' ? await startGitHttpServer(base) : await startGitDaemon(base);
  const figures: RemoteFigure[] = [];
  try {
    for (const files of plan.sizes) {
      const setup = await setUp(env, server, base, files, log);
      const key = `remote.${files}`;
      await measureCheckpoints(env, setup, plan.samples, s, key);
      const off = s.summary(`${key}.off`);
      const on = s.summary(`${key}.on`);
      log(
        `remote ${files} files: checkpoint ${on.median.toFixed(1)} ms on the round with the remote vs ${off.median.toFixed(1)} ms without; counted after ${s.summary(`${key}.onCounted`).median.toFixed(1)} vs ${s.summary(`${key}.offCounted`).median.toFixed(1)} ms (${since()})`,
      );
      const r = await measureCrossHostResume(
        env,
        setup,
        Math.min(plan.samples, plan.remoteResumeSamples, RESUME_SAMPLES_AT[files] ?? Infinity),
        s,
        key,
      );
      const resume = s.summary(`${key}.resume`);
      const resumeUnaimed = s.summary(`${key}.resumeUnaimed`);
      const resumeFetch = s.summary(`${key}.resumeFetch`);
      const resumeCold = s.summary(`${key}.resumeCold`);
      const fetched = s.summary(`${key}.fetchedBytes`);
      const fig: RemoteFigure = {
        files,
        transport: plan.transport,
        touched: REMOTE_TOUCHED,
        repoPackedBytes: setup.repoPackedBytes,
        checkpointOff: off,
        checkpointOn: on,
        push: s.summary(`${key}.push`),
        checkpointRatio: ratio(on.median, off.median),
        modelMs: MODEL_MS,
        countedOff: s.summary(`${key}.offCounted`),
        countedOn: s.summary(`${key}.onCounted`),
        rounds: r.rounds,
        outcomes: r.outcomes,
        crossHostResume: resume,
        crossHostResumeUnaimed: resumeUnaimed,
        crossHostResumeFetch: resumeFetch,
        crossHostResumeCold: resumeCold,
        fetchedBytes: fetched,
        cloneGit: s.summary(`${key}.cloneGit`),
        cloneFile: s.summary(`${key}.cloneFile`),
        partialClone: s.summary(`${key}.partialClone`),
        cloneGitBytes: r.cloneGitBytes,
        partialCloneBytes: r.partialCloneBytes,
        speedupVsClone: ratio(s.summary(`${key}.cloneGit`).median, resume.median),
        speedupVsCloneFile: ratio(s.summary(`${key}.cloneFile`).median, resume.median),
        speedupVsPartial: ratio(s.summary(`${key}.partialClone`).median, resume.median),
        speedupUnaimedVsClone: ratio(s.summary(`${key}.cloneGit`).median, resumeUnaimed.median),
        speedupFetchVsClone: ratio(s.summary(`${key}.cloneGit`).median, resumeFetch.median),
        speedupColdVsClone: ratio(s.summary(`${key}.cloneGit`).median, resumeCold.median),
        floorFetch: s.summary(`${key}.floorFetch`),
        floorCheckout: s.summary(`${key}.floorCheckout`),
        fetchedShareOfRepo: round(fetched.median / setup.repoPackedBytes, 5),
        timeline: r.timeline,
        timelineUnaimed: r.timelineUnaimed,
        timelineFetch: r.timelineFetch,
        timelineCold: r.timelineCold,
      };
      figures.push(fig);
      log(
        `remote ${files} files: cross-host resume ${resume.median.toFixed(1)} ms with the standby (${resumeUnaimed.median.toFixed(1)} unaimed), ${resumeFetch.median.toFixed(1)} ms fetching, ${resumeCold.median.toFixed(1)} ms cold (fetched ${fetched.median} B) vs clone ${fig.cloneGit.median.toFixed(1)} ms, partial ${fig.partialClone.median.toFixed(1)} ms (${since()})`,
      );
    }
  } finally {
    await server.stop();
  }
  return figures;
}
