// JSON Patch (RFC 6902), applied to a remote agent's state as its STATE_DELTA events say. The
// patch is hostile input: it works on a copy, never walks into a prototype, and any operation that
// does not apply fails the whole patch (the caller keeps the state it had).

type Json = unknown;

export class JsonPatchError extends Error {}

const FORBIDDEN = new Set(['__proto__', 'prototype', 'constructor']);

function tokens(pointer: unknown): string[] {
  if (typeof pointer !== 'string' || (pointer !== '' && !pointer.startsWith('/'))) {
    throw new JsonPatchError(`not a JSON pointer: ${JSON.stringify(pointer)}`);
  }
  if (pointer === '') return [];
  const parts = pointer
    .slice(1)
    .split('/')
    .map((t) => t.replaceAll('~1', '/').replaceAll('~0', '~'));
  if (parts.some((t) => FORBIDDEN.has(t))) throw new JsonPatchError(`a forbidden path: ${pointer}`);
  return parts;
}

function isContainer(v: unknown): v is Record<string, Json> | Json[] {
  return typeof v === 'object' && v !== null;
}

function index(arr: Json[], token: string, forAdd: boolean): number {
  if (forAdd && token === '-') return arr.length;
  if (!/^(0|[1-9]\d*)$/.test(token)) throw new JsonPatchError(`not an array index: ${token}`);
  const i = Number(token);
  if (i > arr.length || (!forAdd && i === arr.length)) throw new JsonPatchError(`index out of range: ${token}`);
  return i;
}

/** The parent container of a path and the last token; throws when the parent does not exist. */
function parentOf(doc: Json, path: string[]): [Record<string, Json> | Json[], string] {
  let node = doc;
  for (const t of path.slice(0, -1)) {
    if (Array.isArray(node)) node = node[index(node, t, false)];
    else if (isContainer(node) && Object.hasOwn(node, t)) node = (node as Record<string, Json>)[t];
    else throw new JsonPatchError(`no such path: /${path.join('/')}`);
  }
  if (!isContainer(node)) throw new JsonPatchError(`no such path: /${path.join('/')}`);
  return [node, path.at(-1)!];
}

function get(doc: Json, path: string[]): Json {
  if (!path.length) return doc;
  const [parent, last] = parentOf(doc, path);
  if (Array.isArray(parent)) return parent[index(parent, last, false)];
  if (!Object.hasOwn(parent, last)) throw new JsonPatchError(`no such path: /${path.join('/')}`);
  return parent[last];
}

function remove(doc: Json, path: string[]): Json {
  if (!path.length) throw new JsonPatchError('cannot remove the whole document');
  const [parent, last] = parentOf(doc, path);
  if (Array.isArray(parent)) return parent.splice(index(parent, last, false), 1)[0];
  if (!Object.hasOwn(parent, last)) throw new JsonPatchError(`no such path: /${path.join('/')}`);
  const value = parent[last];
  delete parent[last];
  return value;
}

function add(doc: Json, path: string[], value: Json): Json {
  if (!path.length) return value;
  const [parent, last] = parentOf(doc, path);
  if (Array.isArray(parent)) parent.splice(index(parent, last, true), 0, value);
  else parent[last] = value;
  return doc;
}

const clone = <T>(v: T): T => (v === undefined ? v : JSON.parse(JSON.stringify(v)));

/** `doc` with `patch` applied (a new value; `doc` is not changed). Throws JsonPatchError. */
export function applyJsonPatch(doc: Json, patch: unknown): Json {
  if (!Array.isArray(patch)) throw new JsonPatchError('a patch is an array of operations');
  let out = clone(doc);
  for (const op of patch as Record<string, unknown>[]) {
    if (!isContainer(op)) throw new JsonPatchError('an operation is an object');
    const path = tokens(op.path);
    switch (op.op) {
      case 'add':
        out = add(out, path, clone(op.value));
        break;
      case 'remove':
        remove(out, path);
        break;
      case 'replace':
        if (path.length) remove(out, path);
        out = add(out, path, clone(op.value));
        break;
      case 'move': {
        const from = tokens(op.from);
        const value = remove(out, from);
        out = add(out, path, value);
        break;
      }
      case 'copy':
        out = add(out, path, clone(get(out, tokens(op.from))));
        break;
      case 'test':
        if (JSON.stringify(get(out, path)) !== JSON.stringify(op.value)) throw new JsonPatchError('a test failed');
        break;
      default:
        throw new JsonPatchError(`unknown operation ${JSON.stringify(op.op)}`);
    }
  }
  return out;
}
