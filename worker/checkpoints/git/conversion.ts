// Whether `git add` would store the touched files as exactly their bytes, as the checkpoint's
// fast-import does. What could make it store something else: end-of-line conversion (core.autocrlf,
// the text, eol and crlf attributes), $Id$ collapsing (ident), re-encoding
// (working-tree-encoding), and a mode other than the file's (core.filemode=false,
// core.symlinks=false). Clean filters never run for the worker (git.ts empties every driver).
// When none can apply, the commit is the one `git add` + `git commit` would make, so the row can
// be written before the index is brought in step: that moves the index work off the round.
import { checkinConfig, runGit } from '../../git/run-git.ts';

const ATTRIBUTES = ['text', 'eol', 'crlf', 'ident', 'working-tree-encoding'] as const;
type Attribute = (typeof ATTRIBUTES)[number];

/** git's booleans that mean false; anything else (true, input, a typo) may convert. */
const FALSE = new Set(['false', 'no', 'off', '0']);
const TRUE = new Set(['true', 'yes', 'on', '1']);

/** One path's attributes as `git check-attr` reports them: unspecified, unset, set or a value. */
function storedAsIs(attrs: Map<Attribute, string>, autocrlf: boolean): boolean {
  const is = (name: Attribute, ...values: string[]) => values.includes(attrs.get(name) ?? 'unspecified');
  if (!is('ident', 'unspecified', 'unset') || !is('working-tree-encoding', 'unspecified', 'unset')) return false;
  if (is('text', 'unset')) return true; // binary: no end-of-line conversion whatever eol says
  if (!is('text', 'unspecified')) return false; // text, text=auto
  if (is('crlf', 'unset')) return true; // the old spelling of -text
  return is('crlf', 'unspecified') && is('eol', 'unspecified') && !autocrlf;
}

/**
 * True when git is known to store every path of `paths` as its bytes with the mode on disk; false
 * when it might not (or when that cannot be told). One `git check-attr` for the paths, the
 * config from git.ts's cache.
 */
export async function storesBytesAsIs(worktree: string, paths: string[]): Promise<boolean> {
  if (!paths.length) return true;
  const config = await checkinConfig(worktree);
  if (!config) return false;
  const autocrlf = config.autocrlf === undefined ? false : !FALSE.has(config.autocrlf.toLowerCase());
  const mode = (v: string | undefined) => v === undefined || TRUE.has(v.toLowerCase());
  if (!mode(config.filemode) || !mode(config.symlinks)) return false;
  const out = await runGit(worktree, ['check-attr', '-z', '--stdin', ...ATTRIBUTES], {
    input: paths.join('\0'),
    allowExitCodes: [128],
  });
  if (out.exitCode !== 0) return false;
  // -z output: "<path>\0<attribute>\0<info>\0" for each path and attribute.
  const fields = out.stdout.split('\0');
  const byPath = new Map<string, Map<Attribute, string>>();
  for (let i = 0; i + 2 < fields.length; i += 3) {
    const attrs = byPath.get(fields[i]!) ?? new Map<Attribute, string>();
    attrs.set(fields[i + 1] as Attribute, fields[i + 2]!);
    byPath.set(fields[i]!, attrs);
  }
  return paths.every((p) => {
    const attrs = byPath.get(p);
    return attrs !== undefined && attrs.size === ATTRIBUTES.length && storedAsIs(attrs, autocrlf);
  });
}
