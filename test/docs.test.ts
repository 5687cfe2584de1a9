// The docs a newcomer reads match the project: every page with sections lists them all in its contents,
// every link between pages lands on a page and a heading that exist, and the reference names every
// environment variable the configuration reads.
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { CONFIG_VARIABLES, PROJECT_ROOT } from '../core/config.ts';

const pages = ['README.md', ...readdirSync(path.join(PROJECT_ROOT, 'docs')).filter((f) => f.endsWith('.md'))].map(
  (f) => (f === 'README.md' ? f : `docs/${f}`),
);
const text = new Map(pages.map((p) => [p, readFileSync(path.join(PROJECT_ROOT, p), 'utf8')]));

/** Headings outside fenced code, as GitHub renders them. */
function headings(markdown: string): string[] {
  return markdown
    .replace(/^```[\s\S]*?^```/gm, '')
    .split('\n')
    .flatMap((line) => /^#{1,6} (.+)$/.exec(line)?.[1] ?? []);
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, each space a hyphen. */
function anchor(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}_\- ]/gu, '')
    .replace(/ /g, '-');
}

test('a reference page of four sections or more lists every section in its contents', () => {
  for (const [page, markdown] of text) {
    if (page === 'README.md') continue;
    const sections = markdown.replace(/^```[\s\S]*?^```/gm, '').match(/^## .+$/gm) ?? [];
    if (sections.length < 4) continue;
    for (const section of sections) {
      const link = `](#${anchor(section.slice(3))})`;
      assert.ok(markdown.includes(link), `${page}: the contents lack "${section}" (${link})`);
    }
  }
});

test('every link between the docs lands on a page and a heading that exist', () => {
  for (const [page, markdown] of text) {
    for (const [, target] of markdown.matchAll(/\]\(([^)\s]+)\)/g)) {
      if (/^[a-z]+:/.test(target!)) continue;
      const [file, hash] = target!.split('#') as [string, string | undefined];
      const linked = file ? path.normalize(path.join(path.dirname(page), file)) : page;
      assert.ok(existsSync(path.join(PROJECT_ROOT, linked)), `${page}: ${target} names no file`);
      const body = text.get(linked);
      if (hash === undefined || body === undefined) continue;
      assert.ok(headings(body).map(anchor).includes(hash), `${page}: ${target} names no heading of ${linked}`);
    }
  }
});

test('the reference names every environment variable the configuration reads', () => {
  const reference = text.get('docs/reference.md')!;
  for (const name of CONFIG_VARIABLES) assert.ok(reference.includes(name), `docs/reference.md lacks ${name}`);
});
