// `replay:<path>` only where the operator allows it: inside WORKER_REPLAY_DIR. A job (or a fork)
// names the path, so without this the worker would open any file on the host for any tenant: an
// oracle for which files exist, and a parse error describing whatever it read. A path outside the
// folder is refused before anything on disk is touched; one inside is resolved (symlinks too) and
// checked again, so a link in the folder cannot lead out of it.
import { realpath } from 'node:fs/promises';
import path from 'node:path';
import { EchodoError } from '../../core/errors.ts';

export class ReplayRefusedError extends EchodoError {
  constructor(message: string) {
    super('model_unknown', message);
    this.name = 'ReplayRefusedError';
  }
}

const inside = (dir: string, p: string): boolean => {
  const rel = path.relative(dir, p);
  return rel !== '' && !rel.startsWith('..') && !path.isAbsolute(rel);
};

/**
 * The realpath of a replay transcript path, once it is known to lie inside `replayDir`; throws
 * ReplayRefusedError otherwise. `replayDir` undefined: replay models are off.
 */
export async function replayPathInside(replayPath: string, replayDir: string | undefined): Promise<string> {
  if (!replayDir) {
    throw new ReplayRefusedError('replay: models are not allowed on this worker (WORKER_REPLAY_DIR is not set)');
  }
  if (!path.isAbsolute(replayPath)) throw new ReplayRefusedError(`replay model path "${replayPath}" must be absolute`);
  const outside = () => new ReplayRefusedError(`replay model path "${replayPath}" is outside WORKER_REPLAY_DIR`);
  const dir = path.resolve(replayDir);
  const realDir = await realpath(dir).catch(() => {
    throw new ReplayRefusedError('WORKER_REPLAY_DIR does not exist on this worker');
  });
  // Lexically first: a path outside is refused without a single system call on it.
  const lexical = path.resolve(replayPath);
  if (!inside(dir, lexical) && !inside(realDir, lexical)) throw outside();
  let real: string;
  try {
    real = await realpath(lexical);
  } catch (err) {
    // Inside the folder: saying it is missing tells nothing about the rest of the host.
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return lexical;
    throw new ReplayRefusedError(`replay model path "${replayPath}" cannot be resolved`);
  }
  if (!inside(realDir, real)) throw outside();
  return real;
}
