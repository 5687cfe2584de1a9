// The worker's end of a tree process (server.mjs): one per run attempt, started once, spoken to
// over a pipe, so a file read or a git call costs a message, not a sandbox. Everything it answers
// is treated as hostile input: sizes are checked, and only the fields asked for are read.
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { EchodoError } from '../../core/errors.ts';
import { gitLayout } from '../sandbox/git-dirs.ts';
import type { Toolchain } from '../sandbox/toolchain.ts';
import { INSIDE_SERVER, treeBwrapArgs } from './mounts.ts';

export interface TreeSandbox {
  bwrap: string;
  toolchain: Toolchain;
  rgPath?: string;
}

export interface RunResult {
  stdout: Buffer;
  stderr: string;
  exitCode: number;
  signal: string | null;
  timedOut: boolean;
  /** stdout went past maxBytes: the program was stopped there. */
  truncated: boolean;
}

export interface FileFacts {
  rel: string;
  /** file: a regular file; outside: reached only through a symlinked folder (never followed). */
  kind: 'file' | 'symlink' | 'dir' | 'repo' | 'other' | 'missing' | 'outside';
  /** A symlink's target, as bytes. */
  target?: Buffer;
  exec?: boolean;
  bytes?: number;
  sha256?: string;
  head?: Buffer;
  data?: Buffer;
}

/** A refusal of the tree process (a symlinked folder, a folder where a file was asked for…). */
export class TreeRefusal extends EchodoError {
  constructor(
    readonly refusal: string,
    message: string,
  ) {
    super('tree_refused', message);
  }
}

interface Pending {
  resolve: (value: unknown) => void;
  reject: (err: Error) => void;
}

export class TreeProcess {
  private next = 1;
  private readonly pending = new Map<number, Pending>();
  private exited: Error | undefined;
  /** Paths the tree's watcher saw change (absolute, as inside: the tree is mounted at its own path). */
  private watchers = new Set<(abs: string) => void>();

  private constructor(
    readonly root: string,
    private readonly child: ChildProcess,
  ) {
    createInterface({ input: child.stdout! }).on('line', (line) => this.answer(line));
    let stderr = '';
    child.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString('utf8')).slice(-2000)));
    child.on('close', (code, signal) => {
      this.exited = new EchodoError(
        'tree_process_gone',
        `the tree process of ${root} exited (${signal ?? code}): ${stderr.trim()}`,
      );
      for (const p of this.pending.values()) p.reject(this.exited);
      this.pending.clear();
    });
    child.stdin!.on('error', () => {});
  }

  static async start(sandbox: TreeSandbox, root: string): Promise<TreeProcess> {
    const args = treeBwrapArgs({
      toolchain: sandbox.toolchain,
      root,
      git: await gitLayout(root),
      rgPath: sandbox.rgPath,
    });
    return TreeProcess.spawned(root, sandbox.bwrap, [...args, '--', 'node', INSIDE_SERVER, root]);
  }

  /** The same server without a sandbox (WORKER_SANDBOX=off, or tests driving code directly): still no secret. */
  static async startUnconfined(root: string, serverFile: string): Promise<TreeProcess> {
    return TreeProcess.spawned(root, process.execPath, [serverFile, root]);
  }

  private static spawned(root: string, file: string, args: string[]): TreeProcess {
    const child = spawn(file, args, {
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', LANG: 'C.UTF-8' },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const tree = new TreeProcess(root, child);
    // A tree process never keeps the worker alive: it ends with its stdin, or with the worker.
    child.unref();
    for (const s of [child.stdin, child.stdout, child.stderr]) (s as unknown as { unref?: () => void }).unref?.();
    return tree;
  }

  /** Set once the process has exited: every later call fails with it. */
  get gone(): Error | undefined {
    return this.exited;
  }

  private answer(line: string): void {
    let msg: {
      id?: number;
      ok?: boolean;
      result?: unknown;
      error?: { code?: string; message?: string };
      event?: string;
      path?: unknown;
    };
    try {
      msg = JSON.parse(line);
    } catch {
      return; // not a message of ours: ignored
    }
    if (msg.event === 'changed') {
      if (typeof msg.path === 'string' && msg.path.startsWith(`${this.root}/`))
        for (const w of this.watchers) w(msg.path);
      return;
    }
    const p = typeof msg.id === 'number' ? this.pending.get(msg.id) : undefined;
    if (!p) return;
    this.pending.delete(msg.id!);
    if (this.pending.size === 0) this.hold(false);
    if (msg.ok) p.resolve(msg.result);
    else
      p.reject(
        new TreeRefusal(String(msg.error?.code ?? 'failed'), String(msg.error?.message ?? 'failed').slice(0, 1000)),
      );
  }

  private call<T>(op: string, body: Record<string, unknown> = {}): Promise<T> {
    if (this.exited) return Promise.reject(this.exited);
    const id = this.next++;
    return new Promise<T>((resolve, reject) => {
      if (this.pending.size === 0) this.hold(true);
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.child.stdin!.write(`${JSON.stringify({ id, op, ...body })}\n`);
    });
  }

  /** Keeps the event loop alive only while an answer is awaited. */
  private hold(on: boolean): void {
    const out = this.child.stdout as unknown as { ref?: () => void; unref?: () => void };
    if (on) out.ref?.();
    else out.unref?.();
  }

  ping(): Promise<{ pid: number; uid: number }> {
    return this.call('ping');
  }

  async run(
    argv: string[],
    options: {
      env?: Record<string, string>;
      input?: string | Buffer;
      timeoutMs?: number;
      cwd?: string;
      maxBytes?: number;
    } = {},
  ): Promise<RunResult> {
    const input = options.input === undefined ? undefined : Buffer.from(options.input).toString('base64');
    const r = await this.call<Record<string, unknown>>('run', {
      argv,
      env: options.env,
      input,
      timeoutMs: options.timeoutMs,
      cwd: options.cwd,
      maxBytes: options.maxBytes,
    });
    return {
      stdout: Buffer.from(String(r.stdout), 'base64'),
      stderr: String(r.stderr).slice(0, 64 * 1024),
      exitCode: Number(r.exitCode),
      signal: typeof r.signal === 'string' ? r.signal : null,
      timedOut: r.timedOut === true,
      truncated: r.truncated === true,
    };
  }

  /** A file's facts, with its first `keep` bytes. */
  async read(rel: string, keep: number): Promise<FileFacts> {
    return decodeFacts(await this.call('read', { rel, keep }));
  }

  /** Facts of many paths at once, with their bytes when asked (the checkpoint's content). */
  async files(rels: string[], withData: boolean): Promise<FileFacts[]> {
    const list = await this.call<unknown[]>('files', { rels, withData });
    return list.map(decodeFacts);
  }

  /** Atomic replace through a temp file; stopBeforeRename leaves the temp file (a fault point's crash). */
  write(rel: string, data: Buffer, stopBeforeRename = false): Promise<{ bytes: number; sha256: string }> {
    return this.call('write', { rel, data: data.toString('base64'), stopBeforeRename });
  }

  /** Where rel lands once symlinks inside the sandbox are followed; `outside` when it leaves the tree. */
  realRel(rel: string): Promise<{ real?: string; outside?: boolean }> {
    return this.call('realRel', { rel });
  }

  /** Starts the tree's watcher (once); `onChange` gets each changed path until `unwatch`. */
  async watch(onChange: (abs: string) => void): Promise<void> {
    this.watchers.add(onChange);
    await this.call('watch');
  }

  async unwatch(onChange: (abs: string) => void): Promise<void> {
    this.watchers.delete(onChange);
    if (this.watchers.size === 0 && !this.exited) await this.call('unwatch');
  }

  /** Removes write temp files a crash left under rel; their paths. */
  sweep(rel: string): Promise<string[]> {
    return this.call('sweep', { rel });
  }

  /** Clears setuid/setgid bits set by a command. */
  strip(): Promise<{ stripped: number }> {
    return this.call('strip');
  }

  close(): void {
    this.child.stdin!.end();
    if (!this.exited) setTimeout(() => this.child.kill('SIGKILL'), 2000).unref();
  }
}

function decodeFacts(raw: unknown): FileFacts {
  const r = raw as Record<string, unknown>;
  const kinds = ['file', 'symlink', 'dir', 'repo', 'other', 'missing', 'outside'];
  const kind = kinds.includes(String(r.kind)) ? (r.kind as FileFacts['kind']) : 'other';
  return {
    rel: String(r.rel),
    kind,
    exec: r.exec === true,
    bytes: typeof r.bytes === 'number' ? r.bytes : undefined,
    sha256: typeof r.sha256 === 'string' && /^[0-9a-f]{64}$/.test(r.sha256) ? r.sha256 : undefined,
    head: typeof r.head === 'string' ? Buffer.from(r.head, 'base64') : undefined,
    data: typeof r.data === 'string' ? Buffer.from(r.data, 'base64') : undefined,
    target: typeof r.target === 'string' ? Buffer.from(r.target, 'base64') : undefined,
  };
}
