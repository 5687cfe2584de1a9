// The tree process: the only process that opens paths inside a run's tree or runs git there.
// It runs in a bubblewrap sandbox (worker/tree/mounts.ts) with no secret in its environment, no
// network, uid 65534, and only the tree (and its git dir) of one run mounted. It speaks JSON lines
// on stdin/stdout: {id, op, ...} in, {id, ok, result} or {id, ok: false, error: {code, message}} out.
// Plain JavaScript with node's built-ins only: it starts in tens of milliseconds and loads nothing
// from the project besides this file.
//
// Paths are opened the way openat() would: the process walks into each folder with chdir, refuses
// a component that is a symlink, and checks where it landed through /proc/self/cwd; files are then
// opened by their last name only, with O_NOFOLLOW. A folder swapped for a symlink by a command
// running at the same moment is therefore never followed, whatever the timing.
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { Worker } from 'node:worker_threads';

const ROOT = fs.realpathSync(process.argv[2]);
process.chdir(ROOT);
const { O_RDONLY, O_NOFOLLOW, O_NONBLOCK, O_WRONLY, O_CREAT, O_EXCL, O_DIRECTORY } = fs.constants;
const CHUNK = 64 * 1024;

class Refused extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

/** The folder this process stands in, root-relative ('' for the root), once checked on the way in; null: unknown. */
let here = '';

/** chdir into the folder holding `rel`'s last component; returns that component's name. */
function enterParent(rel) {
  const parts = rel === '.' ? [] : rel.split('/');
  const name = parts.pop() ?? '.';
  const parent = parts.join('/');
  // Already standing in that folder (the files of one checkpoint share folders): the process's
  // working directory is the folder itself, whatever has been renamed or swapped since.
  if (parent === here) return name;
  here = null; // until the walk below has succeeded
  process.chdir(ROOT);
  for (const part of parts) {
    let st;
    try {
      st = fs.lstatSync(part);
    } catch {
      throw new Refused('missing', `folder ${part} does not exist`);
    }
    if (st.isSymbolicLink()) throw new Refused('symlink', `folder ${part} is a symlink (never followed)`);
    if (!st.isDirectory()) throw new Refused('not_dir', `${part} is not a folder`);
    process.chdir(part);
    const at = fs.readlinkSync('/proc/self/cwd');
    if (at !== ROOT && !at.startsWith(`${ROOT}/`)) throw new Refused('symlink', `folder ${part} left the tree`);
  }
  here = parent;
  return name;
}

/** One read buffer for every hash: a checkpoint reads many small files, each one read. */
const SHARED = Buffer.allocUnsafe(CHUNK);

function hashFd(fd, size, keep = 0, withData = false) {
  const hash = createHash('sha256');
  if (withData) {
    // The caller wants the bytes anyway: read them once, whole, and hash them.
    const data = Buffer.allocUnsafe(size);
    let at = 0;
    for (;;) {
      if (at === data.length) break;
      const n = fs.readSync(fd, data, at, data.length - at, null);
      if (n === 0) break;
      at += n;
    }
    const got = data.subarray(0, at);
    return { bytes: at, sha256: hash.update(got).digest('hex'), head: got.subarray(0, keep), data: got };
  }
  const head = Buffer.allocUnsafe(keep);
  let kept = 0;
  let bytes = 0;
  for (;;) {
    const n = fs.readSync(fd, SHARED, 0, CHUNK, null);
    if (n === 0) break;
    const chunk = SHARED.subarray(0, n);
    hash.update(chunk);
    if (kept < keep) kept += chunk.copy(head, kept, 0, Math.min(n, keep - kept));
    bytes += n;
  }
  return { bytes, sha256: hash.digest('hex'), head: head.subarray(0, kept), data: undefined };
}

/**
 * What is at `rel`: a regular file with its hash (and bytes when asked), a symlink with its target,
 * or what else it is. `outside`: a folder on the way is a symlink, so the path is not in the tree.
 */
function describe(rel, { keep = 0, withData = false } = {}) {
  let name;
  try {
    name = enterParent(rel);
  } catch (err) {
    if (err instanceof Refused) return { rel, kind: err.code === 'symlink' ? 'outside' : 'missing' };
    throw err;
  }
  let fd;
  try {
    fd = fs.openSync(name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
  } catch (err) {
    if (err.code === 'ELOOP') return { rel, kind: 'symlink', target: fs.readlinkSync(name, { encoding: 'buffer' }) };
    if (err.code === 'ENOENT' || err.code === 'ENOTDIR') return { rel, kind: 'missing' };
    throw err;
  }
  try {
    const st = fs.fstatSync(fd);
    if (st.isDirectory()) return { rel, kind: fs.existsSync(`${name}/.git`) ? 'repo' : 'dir' };
    if (!st.isFile()) return { rel, kind: 'other' };
    const got = hashFd(fd, st.size, keep, withData);
    return {
      rel,
      kind: 'file',
      exec: (st.mode & 0o111) !== 0,
      bytes: got.bytes,
      sha256: got.sha256,
      head: got.head,
      data: got.data,
    };
  } finally {
    fs.closeSync(fd);
  }
}

function write(rel, data, stopBeforeRename) {
  const parts = rel.split('/');
  // Missing folders are made one at a time, each checked like any other component.
  for (let i = 1; i < parts.length; i++) {
    const name = enterParent(parts.slice(0, i).join('/'));
    try {
      fs.mkdirSync(name, { mode: 0o755 });
    } catch (err) {
      if (err.code !== 'EEXIST') throw err;
    }
  }
  const name = enterParent(rel);
  let mode = 0o644;
  try {
    const st = fs.lstatSync(name);
    if (st.isDirectory()) throw new Refused('is_dir', `${rel} is a folder`);
    if (st.isFile()) mode = st.mode & 0o777 & ~0o6000;
  } catch (err) {
    if (err.code !== 'ENOENT') throw err;
  }
  const temp = `.${Array.from(name).slice(0, 100).join('')}.echodo-tmp-${randomBytes(6).toString('hex')}`;
  const fd = fs.openSync(temp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode);
  try {
    fs.writeSync(fd, data);
    fs.fchmodSync(fd, mode);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  if (stopBeforeRename) return { stopped: true };
  // Both names are relative to the folder this process stands in: the rename cannot be redirected.
  try {
    fs.renameSync(temp, name);
  } catch (err) {
    fs.rmSync(temp, { force: true });
    if (err.code === 'EISDIR' || err.code === 'ENOTEMPTY') throw new Refused('is_dir', `${rel} is a folder`);
    throw err;
  }
  try {
    const dir = fs.openSync('.', O_RDONLY | O_DIRECTORY);
    fs.fsyncSync(dir);
    fs.closeSync(dir);
  } catch {
    // durability of the folder entry is a bonus
  }
  return { bytes: data.length, sha256: createHash('sha256').update(data).digest('hex') };
}

/** Where `rel` really lands, relative to the root ('..' when outside it), following symlinks inside the sandbox. */
function realRel(rel) {
  let real;
  try {
    real = fs.realpathSync(path.join(ROOT, rel));
  } catch (err) {
    if (err.code === 'ELOOP') return { outside: true };
    // A dangling symlink: writing through it would create its target wherever it points.
    let link = false;
    try {
      link = fs.lstatSync(path.join(ROOT, rel)).isSymbolicLink();
    } catch {
      // not there, or below a file: the parent decides
    }
    if (link) return { outside: true };
    // Not there yet: the nearest existing ancestor decides.
    const parent = path.dirname(rel);
    if (parent === rel || parent === '.') return { real: rel };
    const up = realRel(parent);
    return up.outside ? up : { real: up.real === '.' ? path.basename(rel) : `${up.real}/${path.basename(rel)}` };
  }
  if (real === ROOT) return { real: '.' };
  if (!real.startsWith(`${ROOT}/`)) return { outside: true };
  return { real: real.slice(ROOT.length + 1) };
}

/** Clears setuid/setgid bits a command set: they would be root's bits on the host file. */
function stripSpecialBits() {
  return run({
    argv: ['find', ROOT, '-xdev', '-path', `${ROOT}/.git`, '-prune', '-o', '-perm', '/6000', '-type', 'f', '-print0'],
  }).then((r) => {
    const files = r.stdout.toString('utf8').split('\0').filter(Boolean);
    for (const file of files) {
      try {
        const fd = fs.openSync(file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
        try {
          fs.fchmodSync(fd, fs.fstatSync(fd).mode & 0o777 & ~0o6000);
        } finally {
          fs.closeSync(fd);
        }
      } catch {
        // gone or replaced meanwhile: nothing left to strip
      }
    }
    return { stripped: files.length };
  });
}

function run({ argv, env, input, cwd, timeoutMs, maxBytes }) {
  const dir = cwd ?? ROOT;
  if (dir !== ROOT && !dir.startsWith(`${ROOT}/`)) throw new Refused('outside', 'cwd outside the tree');
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0], argv.slice(1), {
      cwd: dir,
      env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env },
    });
    const out = [];
    const err = [];
    let timedOut = false;
    let truncated = false;
    let size = 0;
    const timer = timeoutMs ? setTimeout(() => ((timedOut = true), child.kill('SIGKILL')), timeoutMs) : undefined;
    child.stdout.on('data', (d) => {
      if (truncated) return;
      size += d.length;
      out.push(d);
      // Enough for the caller: the rest would only be dropped.
      if (maxBytes && size > maxBytes) ((truncated = true), child.kill('SIGKILL'));
    });
    child.stderr.on('data', (d) => err.push(d));
    child.on('error', reject);
    child.stdin.on('error', () => {});
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({
        stdout: Buffer.concat(out),
        stderr: Buffer.concat(err).toString('utf8'),
        exitCode: timedOut ? -1 : (code ?? -1),
        signal,
        timedOut,
        truncated,
      });
    });
    child.stdin.end(input ? Buffer.from(input, 'base64') : '');
  });
}

const TEMP_NAME = /^\..*\.echodo-tmp-[0-9a-f]+$/s;

/** Removes write temp files a crash left under `rel` (never entering .git, node_modules or a symlink). */
function sweep(rel) {
  const removed = [];
  const walk = (dir) => {
    let entries;
    try {
      entries = fs.readdirSync(path.join(ROOT, dir), { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries) {
      const child = dir === '.' ? e.name : `${dir}/${e.name}`;
      if (e.isDirectory() && e.name !== '.git' && e.name !== 'node_modules') walk(child);
      else if (e.isFile() && TEMP_NAME.test(e.name)) {
        const name = enterParent(child);
        fs.rmSync(name, { force: true });
        removed.push(child);
      }
    }
  };
  // The walk never enters a symlink (Dirent types are not followed); nor may the folder it starts in.
  if (rel === '.' || describe(rel).kind === 'dir') walk(rel);
  return removed.sort();
}

/** Unasked lines: what the watcher saw change (absolute paths), for the worker's touch tracker. */
const emit = (event) => process.stdout.write(`${JSON.stringify(event)}\n`);

// chokidar, in a thread of its own: its first scan walks the whole tree and must not hold up the
// requests this process answers meanwhile.
let watcher;
function watch() {
  if (watcher) return { watching: true };
  watcher = new Worker(new URL('../checkpoints/watcher-thread.mjs', import.meta.url), { workerData: { root: ROOT } });
  watcher.on('message', (abs) => emit({ event: 'changed', path: abs }));
  watcher.on('error', () => {}); // a watcher that dies leaves the tools' reports and git's cross-check
  return { watching: true };
}

async function unwatch() {
  const w = watcher;
  watcher = undefined;
  if (!w) return { watching: false };
  const exited = new Promise((resolve) => w.once('exit', resolve));
  w.postMessage('stop');
  await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 200))]);
  await w.terminate();
  return { watching: false };
}

const ops = {
  watch,
  unwatch,
  sweep: ({ rel }) => sweep(rel),
  ping: () => ({ pid: process.pid, uid: process.getuid() }),
  read: ({ rel, keep }) => {
    const d = describe(rel, { keep });
    return { ...d, head: d.head?.toString('base64'), target: undefined };
  },
  files: ({ rels, withData }) =>
    rels.map((rel) => {
      const d = describe(rel, { withData });
      return { ...d, head: undefined, data: d.data?.toString('base64'), target: d.target?.toString('base64') };
    }),
  write: ({ rel, data, stopBeforeRename }) => write(rel, Buffer.from(data, 'base64'), stopBeforeRename),
  realRel: ({ rel }) => realRel(rel),
  strip: () => stripSpecialBits(),
  run: async (req) => {
    const r = await run(req);
    return { ...r, stdout: r.stdout.toString('base64') };
  },
};

const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
lines.on('line', async (line) => {
  let req;
  try {
    req = JSON.parse(line);
    const result = await ops[req.op](req);
    process.stdout.write(`${JSON.stringify({ id: req.id, ok: true, result })}\n`);
  } catch (err) {
    const code = err instanceof Refused ? err.code : 'failed';
    process.stdout.write(
      `${JSON.stringify({ id: req?.id, ok: false, error: { code, message: String(err?.message ?? err) } })}\n`,
    );
  } finally {
    process.chdir(ROOT);
    here = '';
  }
});
lines.on('close', () => process.exit(0));
