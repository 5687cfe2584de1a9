// The chokidar watcher of a TouchTracker, in a thread of the tree process (worker/tree/server.mjs):
// its initial scan walks and stats the whole tree, which must not hold up the requests the tree
// process answers meanwhile. Plain JavaScript (the tree process has no TypeScript loader); posts
// each changed path's absolute name.
import path from 'node:path';
import { parentPort, workerData } from 'node:worker_threads';
import { watch } from 'chokidar';

const root = workerData.root;
const gitDir = path.join(root, '.git');
const watcher = watch(root, {
  ignoreInitial: true,
  followSymlinks: false, // a symlink to / in the repo must not make us watch the filesystem
  ignored: (p) =>
    p === gitDir ||
    p.includes(`${path.sep}.git${path.sep}`) ||
    p.includes('.echodo-tmp-') ||
    p.includes(`${path.sep}node_modules${path.sep}`) ||
    p.endsWith(`${path.sep}node_modules`),
  persistent: true,
});
const send = (abs) => parentPort.postMessage(abs);
watcher
  .on('add', send)
  .on('change', send)
  .on('unlink', send)
  .on('error', () => {});
parentPort.on('message', async (message) => {
  if (message === 'stop') {
    await watcher.close();
    process.exit(0);
  }
});
