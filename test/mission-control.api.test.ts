// Mission control's JSON API and auth against a real database and a real HTTP server:
// numbers equal what the table says, tokens gate everything, and one workspace can neither
// see nor even detect another's convoys and runs.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { createMissionControl, type RunningMissionControl } from '../mission-control/server.ts';
import { appendEvent, claimRun, createWorkspace, recordRun } from '../store/runs.ts';
import { createAdminToken, createWorkspaceToken, tokenSha256 } from '../store/tokens.ts';
import { withWorkspace } from '../store/workspace.ts';
import { checkpointHash, type FileTouched } from '../core/checkpoint-hash.ts';
import { parseJob } from '../core/job.ts';
import { spawnNode } from './support/child.ts';
import { createTestDatabase, superuserSql, type TestDatabase } from '../testbed/db.ts';

let t: TestDatabase;
let server: RunningMissionControl;
const tokens = { a: '', b: '', admin: '' };
const runs = { a1: '', a2: '', b1: '', bOnly: '' };

async function seedRun(workspaceId: string, convoyId: string, briefId: string, claim: boolean): Promise<string> {
  return withWorkspace(t.db.app, workspaceId, async (tx) => {
    await createWorkspace(tx);
    const parsed = parseJob({
      jobId: `job-${briefId}`,
      workspaceId,
      convoyId,
      briefId,
      roleId: 'coder',
      harnessAlias: 'code',
      baseRef: 'main',
      brief: 'Add a greeting module.',
      model: 'replay:/tmp/none.json',
    });
    if (!parsed.ok) throw new Error(parsed.problems.join('; '));
    const { agentRunId } = await recordRun(tx, parsed.job);
    if (claim) await claimRun(tx, { agentRunId, workerId: `worker-${workspaceId}`, leaseMs: 60_000 });
    return agentRunId;
  });
}

/** Appends the next checkpoint of a run as the worker does: next seq, linked into the hash chain. */
async function addCheckpoint(workspaceId: string, agentRunId: string): Promise<void> {
  await withWorkspace(t.db.app, workspaceId, async (tx) => {
    const [run] = await tx`select convoy_id, brief_id, attempt, lease_epoch from agent_runs where id = ${agentRunId}`;
    const [prev] = await tx`select checkpoint_seq, hash, tool_history from worker_checkpoints
                             where agent_run_id = ${agentRunId} order by checkpoint_seq desc limit 1`;
    const seq: number = (prev?.checkpoint_seq ?? 0) + 1;
    const filesTouched: FileTouched[] = [
      { path: `src/file-${seq}.ts`, sha256: String(seq).repeat(64).slice(0, 64), bytes: 12, deleted: false },
    ];
    const toolHistory = [
      ...(prev?.tool_history ?? []),
      { round: seq, tool: 'write_file', input: { path: `src/file-${seq}.ts` }, result: 'ok' },
    ];
    const commitOid = seq.toString(16).padStart(40, '0');
    const payload = {
      workspaceId,
      agentRunId,
      checkpointSeq: seq,
      step: seq,
      toolHistory,
      filesTouched,
      branch: 'echodo/b',
      worktreePath: '/tmp/wt',
      commitOid,
    };
    await tx`insert into worker_checkpoints (workspace_id, agent_run_id, convoy_id, brief_id, checkpoint_seq, step, attempt,
               lease_epoch, tool_history, files_touched, branch, worktree_path, commit_oid, prev_hash, hash)
             values (${workspaceId}, ${agentRunId}, ${run!.convoy_id}, ${run!.brief_id}, ${seq}, ${seq}, ${run!.attempt},
               ${run!.lease_epoch}, ${tx.json(toolHistory)}, ${tx.json(filesTouched as never)}, 'echodo/b', '/tmp/wt',
               ${commitOid}, ${prev?.hash ?? null}, ${checkpointHash(prev?.hash ?? null, payload)})`;
  });
}

const get = (path: string, token?: string, headers: Record<string, string> = {}) =>
  fetch(server.url + path, {
    headers: token ? { authorization: `Bearer ${token}`, ...headers } : headers,
    redirect: 'manual',
  });

before(async () => {
  t = await createTestDatabase();
  // Both workspaces have a convoy called convoy-1: only the token decides which one you get.
  runs.a1 = await seedRun('ws-a', 'convoy-1', 'brief-a1', true);
  runs.a2 = await seedRun('ws-a', 'convoy-1', 'brief-a2', false);
  runs.b1 = await seedRun('ws-b', 'convoy-1', 'brief-b1', true);
  runs.bOnly = await seedRun('ws-b', 'convoy-b', 'brief-b2', true);
  for (let i = 0; i < 3; i++) await addCheckpoint('ws-a', runs.a1);
  for (let i = 0; i < 5; i++) await addCheckpoint('ws-b', runs.b1);
  await addCheckpoint('ws-b', runs.bOnly);
  await withWorkspace(t.db.app, 'ws-a', (tx) =>
    appendEvent(tx, { convoyId: 'convoy-1', agentRunId: runs.a1, type: 'run_resumed', metadata: { attempt: 2 } }),
  );
  tokens.a = await createWorkspaceToken(t.db.app, 'ws-a');
  tokens.b = await createWorkspaceToken(t.db.app, 'ws-b');
  tokens.admin = await createAdminToken(t.db.admin);
  server = await createMissionControl({ db: t.db, config: { ...t.config, LOG_LEVEL: 'silent' } }).start(0);
});

after(async () => {
  await server?.close();
  await t?.drop();
});

test('convoy detail: counts and last checkpoint times equal count(*) and max(occurred_at) of worker_checkpoints', async () => {
  const res = await get('/api/convoys/convoy-1', tokens.a);
  assert.equal(res.status, 200);
  const body = await res.json();
  const su = superuserSql(t.url);
  try {
    const [total] = await su`select count(*)::int as n, max(occurred_at) as last from worker_checkpoints
                              where workspace_id = 'ws-a' and convoy_id = 'convoy-1'`;
    assert.equal(body.convoyId, 'convoy-1');
    assert.equal(body.checkpointCount, total!.n);
    assert.equal(body.checkpointCount, 3);
    assert.equal(body.lastCheckpointAt, total!.last.toISOString());
    const stored = await su`select r.id, r.status, r.attempt, count(c.id)::int as n, max(c.occurred_at) as last
                              from agent_runs r
                              left join worker_checkpoints c on c.workspace_id = r.workspace_id and c.agent_run_id = r.id
                             where r.workspace_id = 'ws-a' and r.convoy_id = 'convoy-1' group by r.workspace_id, r.id`;
    assert.equal(body.runs.length, stored.length);
    for (const row of stored) {
      const run = body.runs.find((r: { agentRunId: string }) => r.agentRunId === row.id);
      assert.ok(run, `run ${row.id} listed`);
      assert.equal(run.checkpointCount, row.n);
      assert.equal(run.lastCheckpointAt, row.last ? row.last.toISOString() : null);
      assert.equal(run.status, row.status);
      assert.equal(run.attempt, row.attempt);
    }
  } finally {
    await su.end();
  }
});

test('run checkpoints: newest first, ISO times, commit, hash and files as stored; the chain verifies until a row is edited', async () => {
  const res = await get(`/api/runs/${runs.a1}/checkpoints`, tokens.a);
  assert.equal(res.status, 200);
  const body = await res.json();
  const su = superuserSql(t.url);
  try {
    const rows = await su`select checkpoint_seq, step, occurred_at, commit_oid, hash, files_touched
                            from worker_checkpoints where agent_run_id = ${runs.a1} order by checkpoint_seq desc`;
    assert.equal(body.agentRunId, runs.a1);
    assert.deepEqual(
      body.checkpoints.map((c: Record<string, unknown>) => [
        c.seq,
        c.step,
        c.occurredAt,
        c.commitOid,
        c.hash,
        (c.files as { path: string }[]).map((f) => f.path),
      ]),
      rows.map((r) => [
        r.checkpoint_seq,
        r.step,
        r.occurred_at.toISOString(),
        r.commit_oid,
        r.hash,
        r.files_touched.map((f: { path: string }) => f.path),
      ]),
    );
    assert.deepEqual(body.checkpoints[1].tools, ['write_file']);
    assert.equal(body.chain.ok, true);
    assert.equal(body.chain.verdict, 'verifies');
    assert.equal(body.cursor, null);
    const first = await (await get(`/api/runs/${runs.a1}/checkpoints?limit=2`, tokens.a)).json();
    assert.deepEqual(
      first.checkpoints.map((c: { seq: number }) => c.seq),
      [3, 2],
    );
    const older = await (await get(`/api/runs/${runs.a1}/checkpoints?limit=2&cursor=${first.cursor}`, tokens.a)).json();
    assert.deepEqual(
      older.checkpoints.map((c: { seq: number }) => c.seq),
      [1],
    );
    assert.equal(older.cursor, null);
    assert.equal((await get(`/api/runs/${runs.a1}/checkpoints?cursor=x`, tokens.a)).status, 400);
    assert.deepEqual(
      body.events.map((e: { type: string }) => e.type),
      ['run_resumed'],
    );

    await su`update worker_checkpoints set files_touched = '[]' where agent_run_id = ${runs.a1} and checkpoint_seq = 2`;
    const tampered = await (await get(`/api/runs/${runs.a1}/checkpoints`, tokens.a)).json();
    assert.equal(tampered.chain.ok, false, 'a shown row is hashed again on each read');
    assert.deepEqual(
      tampered.checkpoints.map((c: { verified: boolean }) => c.verified),
      [false, false, true],
    );
  } finally {
    await su`update worker_checkpoints set files_touched = ${su.json([{ path: 'src/file-2.ts', sha256: '2'.repeat(64), bytes: 12, deleted: false }])}
              where agent_run_id = ${runs.a1} and checkpoint_seq = 2`;
    await su.end();
  }
});

test('no token, a bad token or a malformed header: 401 on the API; the pages send you to /login', async () => {
  const attempts: Record<string, string>[] = [
    {},
    { authorization: 'Bearer emc_not-a-real-token' },
    { authorization: `Basic ${tokens.a}` },
    { authorization: 'Bearer' },
  ];
  for (const headers of attempts) {
    const res = await get('/api/convoys/convoy-1', undefined, headers);
    assert.equal(res.status, 401, JSON.stringify(headers));
    assert.equal((await res.json()).error, 'unauthorized');
  }
  for (const path of ['/api/convoys', `/api/runs/${runs.a1}/checkpoints`, '/api/events', '/api/fleet']) {
    assert.equal((await get(path)).status, 401, path);
  }
  const page = await get('/convoys/convoy-1', undefined, { cookie: 'emc_token=emc_forged' });
  assert.equal(page.status, 302);
  assert.equal(
    page.headers.get('location'),
    '/login?next=%2Fconvoys%2Fconvoy-1',
    'sign-in returns to the page asked for',
  );
});

test("another workspace's convoy and run are 404 with exactly the body of ids that never existed", async () => {
  const theirs = await get('/api/convoys/convoy-b', tokens.a);
  const missing = await get('/api/convoys/no-such-convoy', tokens.a);
  assert.equal(theirs.status, 404);
  assert.equal(missing.status, 404);
  assert.equal(await theirs.text(), await missing.text());

  const theirRun = await get(`/api/runs/${runs.b1}/checkpoints`, tokens.a);
  const missingRun = await get('/api/runs/00000000-0000-0000-0000-000000000000/checkpoints', tokens.a);
  assert.equal(theirRun.status, 404);
  assert.equal(missingRun.status, 404);
  assert.equal(await theirRun.text(), await missingRun.text());

  for (const path of [`/runs/${runs.b1}`, '/convoys/convoy-b']) {
    const res = await get(path, undefined, { cookie: `emc_token=${tokens.a}` });
    assert.equal(res.status, 404, path);
    assert.doesNotMatch(await res.text(), new RegExp(runs.b1));
  }
});

test("a workspace's listing and its same-named convoy never include the other workspace's runs", async () => {
  const list = await (await get('/api/convoys', tokens.a)).json();
  assert.deepEqual(
    list.convoys.map((c: { convoyId: string }) => c.convoyId),
    ['convoy-1'],
  );
  assert.equal(list.convoys[0].checkpointCount, 3);
  assert.deepEqual(list.convoys[0].runs, {
    queued: 1,
    running: 1,
    completed: 0,
    failed: 0,
    cancelled: 0,
    budget_exhausted: 0,
  });

  const a = await (await get('/api/convoys/convoy-1', tokens.a)).json();
  const b = await (await get('/api/convoys/convoy-1', tokens.b)).json();
  assert.deepEqual(a.runs.map((r: { agentRunId: string }) => r.agentRunId).sort(), [runs.a1, runs.a2].sort());
  assert.deepEqual(
    b.runs.map((r: { agentRunId: string }) => r.agentRunId),
    [runs.b1],
  );
  assert.equal(b.checkpointCount, 5);

  const page = await (await get('/', undefined, { cookie: `emc_token=${tokens.a}` })).text();
  assert.doesNotMatch(page, /convoy-b/);
});

test('the fleet rollup is admin-only: 403 for a workspace token, 200 with every workspace for an admin', async () => {
  assert.equal((await get('/api/fleet', tokens.a)).status, 403);
  assert.equal((await get('/api/fleet/events', tokens.a)).status, 403);
  assert.equal((await get('/fleet', undefined, { cookie: `emc_token=${tokens.a}` })).status, 403);
  // An admin token carries no workspace, so it reads no workspace's convoys.
  assert.equal((await get('/api/convoys/convoy-1', tokens.admin)).status, 403);

  const res = await get('/api/fleet', tokens.admin);
  assert.equal(res.status, 200);
  const { workspaces } = await res.json();
  const byId = Object.fromEntries(workspaces.map((w: { workspaceId: string }) => [w.workspaceId, w]));
  assert.deepEqual(Object.keys(byId).sort(), ['ws-a', 'ws-b']);
  assert.equal(byId['ws-a'].running, 1);
  assert.equal(byId['ws-a'].queued, 1);
  assert.equal(byId['ws-b'].running, 2);
  assert.equal(byId['ws-b'].checkpointsLastMinute, 6);
  assert.deepEqual(
    byId['ws-b'].workers.map((w: { workerId: string }) => w.workerId),
    ['worker-ws-b'],
  );
  assert.equal((await get('/fleet', undefined, { cookie: `emc_token=${tokens.admin}` })).status, 200);
});

test('sign-in sets an HttpOnly SameSite=Strict cookie; a bad token is refused', async () => {
  const post = (token: string) =>
    fetch(`${server.url}/login`, { method: 'POST', body: new URLSearchParams({ token }), redirect: 'manual' });
  const ok = await post(tokens.a);
  assert.equal(ok.status, 303);
  assert.equal(ok.headers.get('location'), '/');
  const cookie = ok.headers.get('set-cookie') ?? '';
  assert.match(cookie, /^emc_token=emc_[^;]+;/);
  assert.match(cookie, /HttpOnly/);
  assert.match(cookie, /SameSite=Strict/);
  assert.match(cookie, /Path=\//);
  assert.equal((await post('emc_wrong')).status, 401);
  const foreign = await fetch(`${server.url}/login`, {
    method: 'POST',
    body: new URLSearchParams({ token: tokens.a }),
    headers: { origin: 'http://evil.example' },
    redirect: 'manual',
  });
  assert.equal(foreign.status, 403);
});

test('pages escape what they show', async () => {
  const hostile = `<img src=x onerror="alert(1)">`;
  await withWorkspace(t.db.app, 'ws-a', (tx) => tx`insert into convoys (workspace_id, id) values ('ws-a', ${hostile})`);
  try {
    const page = await (await get('/', undefined, { cookie: `emc_token=${tokens.a}` })).text();
    assert.ok(!page.includes(hostile), '!page.includes(hostile)');
    assert.ok(
      page.includes('&lt;img src=x onerror=&quot;alert(1)&quot;&gt;'),
      "page.includes('&lt;img src=x onerror=&quot;alert(1)&quot;&gt;')",
    );
  } finally {
    await withWorkspace(t.db.app, 'ws-a', (tx) => tx`delete from convoys where id = ${hostile}`);
  }
});

/** Reads SSE events from a fetch response until `until` says stop. */
async function readEvents(res: Response, until: (events: { event: string; data: string }[]) => boolean) {
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  const events: { event: string; data: string }[] = [];
  let buffer = '';
  while (!until(events)) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let end: number;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const event = /^event: (.*)$/m.exec(block)?.[1] ?? 'message';
      const data = [...block.matchAll(/^data: (.*)$/gm)].map((m) => m[1]).join('\n');
      if (!block.startsWith(':')) events.push({ event, data });
    }
  }
  await reader.cancel();
  return events;
}

test("the live feed sends a change when a checkpoint is inserted, and only for the token's workspace", async () => {
  const controller = new AbortController();
  const res = await fetch(`${server.url}/api/events`, {
    headers: { authorization: `Bearer ${tokens.a}` },
    signal: controller.signal,
  });
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') ?? '', /text\/event-stream/);
  let inserted = false;
  const events = await readEvents(res, (seen) => {
    if (seen.some((e) => e.event === 'ready') && !inserted) {
      inserted = true;
      // B's checkpoint commits first: had it been forwarded, it would arrive before A's.
      void addCheckpoint('ws-b', runs.b1).then(() => addCheckpoint('ws-a', runs.a1));
    }
    return seen.some((e) => e.event === 'change');
  });
  controller.abort();
  const changes = events.filter((e) => e.event === 'change').map((e) => JSON.parse(e.data));
  assert.deepEqual(changes[0], {
    table: 'worker_checkpoints',
    workspaceId: 'ws-a',
    convoyId: 'convoy-1',
    agentRunId: runs.a1,
  });
});

test('token create: prints a token once and stores only its sha256; bad arguments exit 2; an unknown workspace is named', async () => {
  const env = { ...t.env, LOG_LEVEL: 'silent' };
  const create = spawnNode('scripts/mission-control.ts', ['token', 'create', '--workspace', 'ws-a'], { env });
  assert.equal((await create.exited).code, 0, create.output());
  const token = create.stdout.join('\n').trim();
  assert.match(token, /^emc_[A-Za-z0-9_-]{43}$/);
  const su = superuserSql(t.url);
  try {
    const [row] =
      await su`select workspace_id, is_admin, token_sha256 from mission_control_tokens where token_sha256 = ${tokenSha256(token)}`;
    assert.deepEqual({ ...row }, { workspace_id: 'ws-a', is_admin: false, token_sha256: tokenSha256(token) });
    const [leak] = await su`select count(*)::int as n from mission_control_tokens where token_sha256 = ${token}`;
    assert.equal(leak!.n, 0);
  } finally {
    await su.end();
  }
  assert.equal((await get('/api/convoys/convoy-1', token)).status, 200);

  for (const args of [
    ['token'],
    ['token', 'create'],
    ['token', 'create', '--workspace'],
    ['token', 'create', '--workspace', 'ws-a', '--admin'],
    ['token', 'create', '--bogus'],
  ]) {
    const bad = spawnNode('scripts/mission-control.ts', args, { env });
    assert.equal((await bad.exited).code, 2, `${args.join(' ')}: ${bad.output()}`);
    assert.match(bad.output(), /usage: npm run mission-control/);
  }
  const unknown = spawnNode('scripts/mission-control.ts', ['token', 'create', '--workspace', 'nope'], { env });
  assert.equal((await unknown.exited).code, 2);
  assert.match(unknown.output(), /workspace "nope" does not exist/);
});
