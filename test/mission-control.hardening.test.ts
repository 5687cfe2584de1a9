// Mission control under hostile input, on a real HTTP server on loopback: request bodies are
// capped (413 without reading a 150 MB upload), malformed ids are not found (never a 500), the
// session cookie is Secure over https and ends, and tokens have a lifecycle: read-only tokens
// cannot write, expired and revoked ones are unknown, and the CLI lists (never the token) and
// revokes them.
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, test } from 'node:test';
import { createMissionControl, MAX_BODY_BYTES, type RunningMissionControl } from '../mission-control/server.ts';
import { createWorkspace } from '../store/runs.ts';
import { createWorkspaceToken, createWorkspaceTokenWithId, revokeToken, tokenSha256 } from '../store/tokens.ts';
import { withWorkspace } from '../store/workspace.ts';
import { spawnNode } from './support/child.ts';
import { createTestDatabase, superuserSql, type TestDatabase } from '../testbed/db.ts';

const WS = 'ws-hard';
let t: TestDatabase;
let server: RunningMissionControl;
let token = '';

const request = (path: string, init: RequestInit & { token?: string } = {}) =>
  fetch(server.url + path, {
    ...init,
    redirect: 'manual',
    headers: {
      ...(init.token ? { authorization: `Bearer ${init.token}` } : {}),
      ...(init.headers as Record<string, string>),
    },
  });

before(async () => {
  t = await createTestDatabase();
  await withWorkspace(t.db.app, WS, (tx) => createWorkspace(tx));
  token = await createWorkspaceToken(t.db.app, WS);
  server = await createMissionControl({ db: t.db, config: { ...t.config, LOG_LEVEL: 'silent' } }).start(0);
});

after(async () => {
  await server?.close();
  await t?.drop();
});

/** POSTs `total` bytes in chunks, without Content-Length; resolves with the status and how much was sent. */
function streamUpload(path: string, total: number): Promise<{ status: number; sent: number }> {
  return new Promise((resolve, reject) => {
    const url = new URL(server.url + path);
    const req = http.request({
      host: url.hostname,
      port: url.port,
      path: url.pathname,
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    const chunk = Buffer.alloc(256 * 1024, 'a');
    let sent = 0;
    let status = 0;
    req.on('response', (res) => {
      status = res.statusCode ?? 0;
      res.resume();
      res.on('end', () => {
        req.destroy();
        resolve({ status, sent });
      });
    });
    req.on('error', (err) => (status ? resolve({ status, sent }) : reject(err)));
    const pump = () => {
      while (sent < total && !status) {
        sent += chunk.length;
        if (!req.write(chunk)) return void req.once('drain', pump);
      }
      if (!status) req.end();
    };
    pump();
  });
}

test('every POST body is capped: 413 by Content-Length at once, and by counting a chunked 150 MB upload', async () => {
  const big = 'token=' + 'x'.repeat(MAX_BODY_BYTES + 1);
  for (const path of [
    '/login',
    '/logout',
    '/api/runs/run-1/cancel',
    '/api/runs/run-1/fork',
    '/runs/run-1/actions/retry',
  ]) {
    const res = await request(path, {
      method: 'POST',
      body: big,
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      token,
    });
    assert.equal(res.status, 413, `${path}: ${res.status}`);
    assert.equal((await res.json()).error, 'payload_too_large');
  }
  const before = process.memoryUsage().rss;
  const upload = await streamUpload('/login', 150 * 1024 * 1024);
  assert.equal(upload.status, 413);
  assert.ok(
    upload.sent < 150 * 1024 * 1024,
    `the server read the whole upload (${upload.sent} bytes) before answering`,
  );
  assert.ok(process.memoryUsage().rss - before < 100 * 1024 * 1024, 'the upload was buffered in memory');
  // A small sign-in still works.
  const ok = await request('/login', { method: 'POST', body: new URLSearchParams({ token }) });
  assert.equal(ok.status, 303);
});

test('malformed ids are 404 with the not-found body, never a 500, and only after the token', async () => {
  const notFound = {
    convoy: { error: 'not_found', message: 'convoy not found' },
    run: { error: 'not_found', message: 'run not found' },
  };
  const cases: [string, keyof typeof notFound][] = [
    ['/api/convoys/a%00b', 'convoy'],
    ['/api/convoys/%ED%A0%80', 'convoy'], // a lone surrogate
    ['/api/convoys/%ZZ', 'convoy'],
    [`/api/convoys/${'c'.repeat(300)}`, 'convoy'],
    ['/api/convoys/..%2F..%2Fetc', 'convoy'],
    ['/api/runs/a%00b/checkpoints', 'run'],
    ['/api/runs/-rf/checkpoints', 'run'],
    ['/api/runs/a%00b/checkpoints/1/diff', 'run'],
  ];
  for (const [path, what] of cases) {
    const res = await request(path, { token });
    assert.equal(res.status, 404, `${path}: ${res.status}`);
    assert.deepEqual(await res.json(), notFound[what], path);
    assert.equal((await request(path)).status, 401, `${path} without a token`);
  }
  const post = await request('/api/runs/a%00b/cancel', { method: 'POST', token });
  assert.equal(post.status, 404);
  const page = await request('/convoys/a%00b', { headers: { cookie: `emc_token=${token}` } });
  assert.equal(page.status, 404);
  assert.match(await page.text(), /convoy not found/);
  assert.equal((await request('/runs/a%00b', { headers: { cookie: `emc_token=${token}` } })).status, 404);
});

test('the session cookie has a Max-Age, and Secure when served over https', async () => {
  const plain = await request('/login', { method: 'POST', body: new URLSearchParams({ token }) });
  const cookie = plain.headers.get('set-cookie') ?? '';
  assert.match(cookie, /^emc_token=/);
  assert.match(cookie, /HttpOnly/);
  assert.match(cookie, /SameSite=Strict/);
  assert.match(cookie, /Max-Age=43200/);
  assert.doesNotMatch(cookie, /Secure/);
  const https = await request('/login', {
    method: 'POST',
    body: new URLSearchParams({ token }),
    headers: { 'x-forwarded-proto': 'https' },
  });
  assert.match(https.headers.get('set-cookie') ?? '', /; Secure/);
  // A token that expires sooner than a session ends the cookie with it.
  const soon = await createWorkspaceTokenWithId(t.db.app, WS, { expiresAt: new Date(Date.now() + 600_000) });
  const short = await request('/login', { method: 'POST', body: new URLSearchParams({ token: soon.token }) });
  const maxAge = Number(/Max-Age=(\d+)/.exec(short.headers.get('set-cookie') ?? '')?.[1]);
  assert.ok(maxAge > 590 && maxAge <= 600, `Max-Age ${maxAge} follows the token's expiry`);
});

test('a read-only token reads and gets 403 on every POST; expired and revoked tokens are 401', async () => {
  const readOnly = await createWorkspaceTokenWithId(t.db.app, WS, { readOnly: true });
  assert.equal((await request('/api/convoys', { token: readOnly.token })).status, 200);
  for (const path of [
    '/api/runs/run-1/cancel',
    '/api/runs/run-1/retry',
    '/api/runs/run-1/fork',
    '/api/runs/other-run/cancel',
  ]) {
    const res = await request(path, {
      method: 'POST',
      token: readOnly.token,
      body: '{"at":1}',
      headers: { 'content-type': 'application/json' },
    });
    assert.equal(res.status, 403, `${path}: ${res.status}`);
  }
  const form = await request('/runs/run-1/actions/cancel', {
    method: 'POST',
    headers: { cookie: `emc_token=${readOnly.token}` },
  });
  assert.equal(form.status, 403);

  const expiring = await createWorkspaceTokenWithId(t.db.app, WS, { expiresAt: new Date(Date.now() + 60_000) });
  assert.equal((await request('/api/convoys', { token: expiring.token })).status, 200);
  const su = superuserSql(t.url);
  try {
    await su`update mission_control_tokens set expires_at = now() - interval '1 second' where id = ${expiring.id}`;
  } finally {
    await su.end({ timeout: 1 });
  }
  assert.equal((await request('/api/convoys', { token: expiring.token })).status, 401);
  const signIn = await request('/login', { method: 'POST', body: new URLSearchParams({ token: expiring.token }) });
  assert.equal(signIn.status, 401, 'an expired token cannot sign in');

  const revoked = await createWorkspaceTokenWithId(t.db.app, WS);
  assert.equal((await request('/api/convoys', { token: revoked.token })).status, 200);
  assert.equal(await revokeToken(t.db.admin, revoked.id), 'revoked');
  assert.equal(await revokeToken(t.db.admin, revoked.id), 'already revoked');
  assert.equal(await revokeToken(t.db.admin, '999999999'), 'unknown');
  assert.equal((await request('/api/convoys', { token: revoked.token })).status, 401);
  assert.equal(
    (await request('/', { headers: { cookie: `emc_token=${revoked.token}` } })).status,
    302,
    'a revoked cookie goes to /login',
  );
});

test('token CLI: create --read-only --expires, list (never the token), revoke; unknown id and bad duration exit 2', async () => {
  const env = { ...t.env, LOG_LEVEL: 'silent' };
  const cli = async (...args: string[]) => {
    const child = spawnNode('scripts/mission-control.ts', ['token', ...args], { env });
    const { code } = await child.exited;
    return { code, out: child.stdout.join('\n'), all: child.output() };
  };
  const created = await cli('create', '--workspace', WS, '--read-only', '--expires', '30d');
  assert.equal(created.code, 0, created.all);
  const text = created.out.trim();
  assert.match(text, /^emc_[A-Za-z0-9_-]{43}$/);
  const id = /id (\d+)/.exec(created.all)?.[1];
  assert.ok(id, `the id is named: ${created.all}`);

  assert.equal((await request('/api/runs/r/cancel', { method: 'POST', token: text })).status, 403);
  const revoked = await cli('revoke', id!);
  assert.equal(revoked.code, 0, revoked.all);
  assert.match(revoked.out, new RegExp(`token ${id} revoked`));
  assert.equal((await request('/api/convoys', { token: text })).status, 401);

  const listed = await cli('list', '--workspace', WS);
  assert.equal(listed.code, 0, listed.all);
  assert.ok(
    !listed.all.includes(text) && !listed.all.includes(tokenSha256(text)),
    'token list printed the token or its hash',
  );
  assert.match(listed.out, /^id\s+workspace\s+kind\s+created\s+last used\s+expires\s+status/);
  const row = listed.out.split('\n').find((line) => line.startsWith(`${id} `));
  assert.ok(row, `token ${id} listed:\n${listed.out}`);
  const cells = row.split(/\s{2,}/);
  assert.equal(cells[1], WS);
  assert.equal(cells[2], 'read-only');
  assert.match(cells[4]!, /^\d{4}-\d\d-\d\dT/, 'last used: it was used above');
  const days = (Date.parse(cells[5]!) - Date.now()) / 86_400_000;
  assert.ok(days > 29.9 && days <= 30, `expires in ${days} days`);
  assert.match(cells[6]!, /^revoked \d{4}-/);

  const unknown = await cli('revoke', '987654321');
  assert.equal(unknown.code, 2);
  assert.match(unknown.all, /no token with id "987654321"/);
  const bad = await cli('create', '--workspace', WS, '--expires', 'soon');
  assert.equal(bad.code, 2);
  assert.match(bad.all, /--expires: "soon" is not a duration/);
});
