// Git objects and refs read in this process, for the verification's hot path: starting a git
// process costs a fork of the worker first, more than reading the few small objects
// the integrity check and resume need (a notes commit, its trees, one note, one commit).
// Only positive answers are trusted: every object returned has been hashed and matches its id
// (SHA-1 of "<type> <size>\0<body>"), so it is git's own bytes. Anything not found here (an
// object in a pack written after the listing, an alternate, a promisor remote, a SHA-256 or
// reftable repository, an idx format this does not parse) is `undefined`, and callers ask git.
import { createHash } from 'node:crypto';
import { closeSync, existsSync, openSync, readdirSync, readFileSync, readSync } from 'node:fs';
import path from 'node:path';
import { inflateSync } from 'node:zlib';

export type ObjectType = 'commit' | 'tree' | 'blob' | 'tag';

export interface GitObject {
  type: ObjectType;
  body: Buffer;
}

export interface TreeEntry {
  mode: string;
  oid: string;
}

const TYPES: Record<number, ObjectType> = { 1: 'commit', 2: 'tree', 3: 'blob', 4: 'tag' };
const OFS_DELTA = 6;
const REF_DELTA = 7;
/** Far beyond git's own (50 by default, 250 for --aggressive): only a corrupt pack loops this deep. */
const MAX_DELTA_DEPTH = 10_000;
const OID = /^[0-9a-f]{40}$/;

/** A pack's .idx (version 2) and its .pack, both opened at the first lookup. */
interface Pack {
  idx: number;
  pack: number;
  count: number;
  fanout: Uint32Array;
}

function pread(fd: number, at: number, length: number): Buffer {
  const buf = Buffer.allocUnsafe(length);
  let got = 0;
  while (got < length) {
    const n = readSync(fd, buf, got, length - got, at + got);
    if (n === 0) break;
    got += n;
  }
  return got === length ? buf : buf.subarray(0, got);
}

/** The zlib stream at `at` of a pack, inflated to exactly `size` bytes (its deflated form is at most a little longer). */
function inflateAt(fd: number, at: number, size: number): Buffer {
  const out = inflateSync(pread(fd, at, size + (size >> 9) + 128)); // zlib ignores the bytes after its stream
  if (out.length !== size) throw new Error(`pack entry at ${at}: inflated to ${out.length} bytes, header says ${size}`);
  return out;
}

/** git's delta format: base size, result size, then copy-from-base and insert instructions. */
export function applyDelta(base: Buffer, delta: Buffer): Buffer {
  let i = 0;
  const size = () => {
    let value = 0;
    let shift = 0;
    let c: number;
    do {
      c = delta[i++]!;
      value += (c & 0x7f) * 2 ** shift;
      shift += 7;
    } while (c & 0x80);
    return value;
  };
  if (size() !== base.length) throw new Error('delta: base size mismatch');
  const out = Buffer.allocUnsafe(size());
  let o = 0;
  while (i < delta.length) {
    const op = delta[i++]!;
    if (op & 0x80) {
      let offset = 0;
      let length = 0;
      for (let b = 0; b < 4; b++) if (op & (1 << b)) offset += delta[i++]! * 2 ** (8 * b);
      for (let b = 0; b < 3; b++) if (op & (0x10 << b)) length += delta[i++]! * 2 ** (8 * b);
      if (length === 0) length = 0x10000;
      if (offset + length > base.length || o + length > out.length) throw new Error('delta: copy out of range');
      base.copy(out, o, offset, offset + length);
      o += length;
    } else if (op) {
      if (i + op > delta.length || o + op > out.length) throw new Error('delta: insert out of range');
      delta.copy(out, o, i, i + op);
      i += op;
      o += op;
    } else {
      throw new Error('delta: reserved opcode 0');
    }
  }
  if (o !== out.length) throw new Error('delta: result size mismatch');
  return out;
}

/** A tree object's entries by name. */
export function parseTree(body: Buffer): Map<string, TreeEntry> {
  const entries = new Map<string, TreeEntry>();
  let at = 0;
  while (at < body.length) {
    const space = body.indexOf(0x20, at);
    const nul = body.indexOf(0, space);
    if (space < 0 || nul < 0 || nul + 21 > body.length) throw new Error('tree: truncated entry');
    entries.set(body.toString('utf8', space + 1, nul), {
      mode: body.toString('latin1', at, space),
      oid: body.toString('hex', nul + 1, nul + 21),
    });
    at = nul + 21;
  }
  return entries;
}

/** The `tree` header line of a commit object. */
export function commitTree(body: Buffer): string | undefined {
  const m = /^tree ([0-9a-f]{40})\n/.exec(body.toString('latin1', 0, 46));
  return m?.[1];
}

/** The ids of every object in a pack, from its version-2 .idx (sorted, as the index holds them). */
export function packObjectIds(idxPath: string): string[] {
  const idx = readFileSync(idxPath);
  if (idx.length < 8 + 1024 || idx.readUInt32BE(0) !== 0xff744f63 || idx.readUInt32BE(4) !== 2) {
    throw new Error(`${idxPath}: not a version-2 pack index`);
  }
  const count = idx.readUInt32BE(8 + 255 * 4);
  const ids: string[] = [];
  for (let i = 0, at = 8 + 1024; i < count; i++, at += 20) ids.push(idx.toString('hex', at, at + 20));
  return ids;
}

/** Reads objects and refs of one repository; `close()` when done (it holds the packs open). */
export class ObjectReader {
  private packs: Pack[] | undefined;
  /** Resolved pack entries by "<pack>:<offset>": delta chains share their bases. */
  private readonly entries = new Map<string, GitObject>();

  private constructor(private readonly commonDir: string) {}

  /** undefined for a folder without objects, or a repository this reader does not handle (reftable refs). */
  static open(commonDir: string): ObjectReader | undefined {
    if (!existsSync(path.join(commonDir, 'objects')) || existsSync(path.join(commonDir, 'reftable'))) return undefined;
    return new ObjectReader(commonDir);
  }

  /** The object `oid`, checked against its id; undefined when not found here or not intact. */
  read(oid: string): GitObject | undefined {
    if (!OID.test(oid)) return undefined;
    let object: GitObject | undefined;
    try {
      object = this.readRaw(oid, 0);
    } catch {
      return undefined; // a pack this cannot parse, or one truncated by a concurrent repack: git decides
    }
    if (!object) return undefined;
    const id = createHash('sha1').update(`${object.type} ${object.body.length}\0`).update(object.body).digest('hex');
    return id === oid ? object : undefined;
  }

  /** A ref's object id (loose first, then packed-refs, as git reads them; symbolic refs followed). */
  resolveRef(name: string): string | undefined {
    for (let hops = 0; hops < 5; hops++) {
      if (!name.startsWith('refs/') || name.split('/').some((part) => part === '' || part === '.' || part === '..'))
        return undefined;
      let loose: string | undefined;
      try {
        loose = readFileSync(path.join(this.commonDir, name), 'utf8').trim();
      } catch {
        loose = undefined;
      }
      if (loose?.startsWith('ref: ')) {
        name = loose.slice('ref: '.length);
        continue;
      }
      if (loose !== undefined) return OID.test(loose) ? loose : undefined;
      return this.packedRef(name);
    }
    return undefined;
  }

  close(): void {
    for (const pack of this.packs ?? []) {
      closeSync(pack.idx);
      closeSync(pack.pack);
    }
    this.packs = [];
    this.entries.clear();
  }

  private packedRef(name: string): string | undefined {
    let text: string;
    try {
      text = readFileSync(path.join(this.commonDir, 'packed-refs'), 'utf8');
    } catch {
      return undefined;
    }
    for (const line of text.split('\n')) {
      if (line.length === 41 + name.length && line.endsWith(` ${name}`) && OID.test(line.slice(0, 40)))
        return line.slice(0, 40);
    }
    return undefined;
  }

  private readRaw(oid: string, depth: number): GitObject | undefined {
    if (depth > MAX_DELTA_DEPTH) return undefined;
    for (const [i, pack] of this.listPacks().entries()) {
      const offset = this.find(pack, oid);
      if (offset !== undefined) return this.readPacked(i, offset, depth);
    }
    return this.readLoose(oid);
  }

  private readLoose(oid: string): GitObject | undefined {
    let raw: Buffer;
    try {
      raw = inflateSync(readFileSync(path.join(this.commonDir, 'objects', oid.slice(0, 2), oid.slice(2))));
    } catch {
      return undefined;
    }
    const nul = raw.indexOf(0);
    const m = /^(commit|tree|blob|tag) (\d+)$/.exec(raw.toString('latin1', 0, Math.max(nul, 0)));
    if (nul < 0 || !m || Number(m[2]) !== raw.length - nul - 1) return undefined;
    return { type: m[1] as ObjectType, body: raw.subarray(nul + 1) };
  }

  /** Every pack with a version-2 index, opened once; a pack removed meanwhile (a repack) is skipped. */
  private listPacks(): Pack[] {
    if (this.packs) return this.packs;
    this.packs = [];
    const dir = path.join(this.commonDir, 'objects', 'pack');
    let names: string[];
    try {
      names = readdirSync(dir).filter((n) => n.endsWith('.idx'));
    } catch {
      return this.packs;
    }
    for (const name of names) {
      let idx: number | undefined;
      try {
        idx = openSync(path.join(dir, name), 'r');
        const head = pread(idx, 0, 8 + 256 * 4);
        if (head.length < 8 + 256 * 4 || head.readUInt32BE(0) !== 0xff744f63 || head.readUInt32BE(4) !== 2) {
          closeSync(idx);
          continue; // a version-1 index: not read here
        }
        const fanout = new Uint32Array(256);
        for (let b = 0; b < 256; b++) fanout[b] = head.readUInt32BE(8 + b * 4);
        const pack = openSync(path.join(dir, `${name.slice(0, -'.idx'.length)}.pack`), 'r');
        this.packs.push({ idx, pack, count: fanout[255]!, fanout });
      } catch {
        if (idx !== undefined) closeSync(idx);
      }
    }
    return this.packs;
  }

  /** The offset of `oid` in `pack`: the names of its first byte's bucket read at once, searched in memory. */
  private find(pack: Pack, oid: string): number | undefined {
    const first = parseInt(oid.slice(0, 2), 16);
    const lo = first === 0 ? 0 : pack.fanout[first - 1]!;
    const hi = pack.fanout[first]!;
    if (hi <= lo) return undefined;
    const names = pread(pack.idx, 8 + 1024 + lo * 20, (hi - lo) * 20);
    const want = Buffer.from(oid, 'hex');
    let a = 0;
    let b = hi - lo;
    while (a < b) {
      const mid = (a + b) >> 1;
      const cmp = names.compare(want, 0, 20, mid * 20, mid * 20 + 20);
      if (cmp === 0) return this.offsetOf(pack, lo + mid);
      if (cmp < 0) a = mid + 1;
      else b = mid;
    }
    return undefined;
  }

  private offsetOf(pack: Pack, position: number): number {
    const offsets = 8 + 1024 + pack.count * 24; // after the names and the CRCs
    const small = pread(pack.idx, offsets + position * 4, 4).readUInt32BE(0);
    if (!(small & 0x80000000)) return small;
    const large = pread(pack.idx, offsets + pack.count * 4 + (small & 0x7fffffff) * 8, 8);
    return large.readUInt32BE(0) * 2 ** 32 + large.readUInt32BE(4);
  }

  private readPacked(packIndex: number, offset: number, depth: number): GitObject | undefined {
    const key = `${packIndex}:${offset}`;
    const cached = this.entries.get(key);
    if (cached) return cached;
    if (depth > MAX_DELTA_DEPTH) return undefined;
    const pack = this.packs![packIndex]!;
    const head = pread(pack.pack, offset, 32);
    let c = head[0]!;
    const type = (c >> 4) & 7;
    let size = c & 0x0f;
    let shift = 4;
    let i = 1;
    while (c & 0x80) {
      c = head[i++]!;
      size += (c & 0x7f) * 2 ** shift;
      shift += 7;
    }
    let object: GitObject | undefined;
    if (TYPES[type]) {
      object = { type: TYPES[type]!, body: inflateAt(pack.pack, offset + i, size) };
    } else if (type === OFS_DELTA) {
      c = head[i++]!;
      let back = c & 0x7f;
      while (c & 0x80) {
        c = head[i++]!;
        back = (back + 1) * 128 + (c & 0x7f);
      }
      const delta = inflateAt(pack.pack, offset + i, size);
      const base = this.readPacked(packIndex, offset - back, depth + 1);
      object = base && { type: base.type, body: applyDelta(base.body, delta) };
    } else if (type === REF_DELTA) {
      const baseOid = head.toString('hex', i, i + 20);
      const delta = inflateAt(pack.pack, offset + i + 20, size);
      const base = this.readRaw(baseOid, depth + 1);
      object = base && { type: base.type, body: applyDelta(base.body, delta) };
    }
    if (object && object.type !== 'blob') this.entries.set(key, object); // trees and commits: what chains share
    return object;
  }
}
