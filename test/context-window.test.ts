// A long run's conversation stays bounded: a real worker runs an OpenAI-compatible model served on
// loopback, and the server records what each round was sent. With WORKER_CONTEXT_ROUNDS=3 every
// request holds the last three to five rounds verbatim and the ones before as the summary, and its
// size stops growing. The same worker's log lines of the run all name the run (workspace, run, attempt)
// and the checkpoint seq where there is one.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createScenario } from './support/scenario.ts';
import { startChatServer } from './support/chat-server.ts';
import { grantKey } from './support/grants.ts';
import { waitFor } from './support/child.ts';
import {
  boundHistory,
  MAX_SUMMARY_CHARS,
  recordToolCall,
  summarizeHistoryForPrompt,
  type ToolCallRecord,
} from '../worker/checkpoints/history.ts';
import { buildSystemPrompt, ContextWindow } from '../worker/run/context-window.ts';
import { cachedSystem } from '../worker/models/prompt-cache.ts';
import { builtinHarnesses } from '../worker/run/harnesses.ts';

const KEY_VAR = 'ECHODO_CONTEXT_API_KEY';
const ROUNDS = 12;
const KEEP = 3;
/** Each round writes a file this long: a conversation that kept every round would grow by it. */
const CONTENT = 'x'.repeat(2000);

test('WORKER_CONTEXT_ROUNDS=3: each request holds at least the last 3 rounds verbatim and a bounded summary; run log lines name the run', async (t) => {
  const server = await startChatServer([
    ...Array.from({ length: ROUNDS }, (_, i) => ({
      toolCalls: [
        { name: 'write_file', arguments: { path: `src/f${String(i + 1).padStart(2, '0')}.ts`, content: CONTENT } },
      ],
    })),
    { text: 'Done.' },
  ]);
  const s = await createScenario({
    steps: [{ text: 'unused' }],
    workspaceId: 'context',
    env: {
      WORKER_CONTEXT_ROUNDS: String(KEEP),
      WORKER_CHECKPOINT_HISTORY_LIMIT: '6',
      WORKER_MAX_TOOL_STEPS: String(ROUNDS + 5),
    },
  });
  t.after(async () => {
    await s.close();
    await server.close();
  });
  await grantKey(s.su, s.workspaceId, KEY_VAR, ['127.0.0.1']);
  await s.su`insert into model_providers (workspace_id, alias, provider, base_url, model, api_key_env_var)
             values (${s.workspaceId}, 'local', 'openai-compatible', ${server.baseURL}, 'm-1', ${KEY_VAR})`;
  const worker = s.spawnWorker({ [KEY_VAR]: 'sk-context-test-1234567890' });
  await worker.waitForLine(/"worker started"/);
  const { agentRunId } = await s.dispatch({ model: 'local' });
  const run = await waitFor(
    async () => {
      const r = await s.run(agentRunId);
      return ['completed', 'failed'].includes(r.status) ? r : undefined;
    },
    { timeoutMs: 60_000, what: 'the run to finish' },
  );
  assert.equal(run.status, 'completed', `${run.failure_reason}\n${worker.output()}`);
  assert.equal(server.requests.length, ROUNDS + 1);

  const sizes: number[] = [];
  const summaries: number[] = [];
  server.requests.forEach(({ body }, i) => {
    // Request i is sent after i rounds; the server named round r's call call_<r>_0.
    const messages = body.messages as { role: string; content?: string; tool_calls?: { id: string }[] }[];
    const calls = messages.flatMap((m) => (m.tool_calls ?? []).map((c) => c.id));
    // The oldest rounds leave the window KEEP at a time, when it holds 2 × KEEP.
    const kept = i < 2 * KEEP ? i : KEEP + ((i - 2 * KEEP) % KEEP);
    const verbatim = Array.from({ length: kept }, (_, k) => `call_${i - kept + k + 1}_0`);
    assert.deepEqual(calls, verbatim, `request ${i}: at least the last ${KEEP} rounds verbatim`);
    assert.equal(messages.filter((m) => m.role === 'tool').length, verbatim.length, `request ${i}: their results`);
    const system = messages.find((m) => m.role === 'system')!.content!;
    const through = i - verbatim.length;
    if (through > 0) {
      assert.match(system, new RegExp(`What was done up to round ${through}:`), `request ${i}: the summary`);
      assert.match(system, new RegExp(`- round ${through}: write_file`), `request ${i}: round ${through} summarised`);
      assert.doesNotMatch(
        system,
        new RegExp(`- round ${through + 1}:`),
        `request ${i}: verbatim rounds not summarised`,
      );
    } else assert.doesNotMatch(system, /What was done/);
    sizes.push(JSON.stringify(messages).length);
    summaries.push(system.length);
  });
  // Bounded: a request is its verbatim rounds plus a head whose summary stops growing once the
  // checkpoint's history window (6 rounds here) is full.
  for (const [i, size] of sizes.entries()) {
    const kept = i < 2 * KEEP ? i : KEEP + ((i - 2 * KEEP) % KEEP);
    assert.ok(size < kept * (CONTENT.length + 400) + 4000, `request ${i}: ${size} chars for ${kept} rounds`);
  }
  assert.ok(Math.max(...summaries.slice(9)) <= summaries[9]! * 1.05, `summary sizes ${summaries.join(', ')}`);

  // Every line of the run carries the run's identity; the round and checkpoint lines their seq. The
  // completion is logged after the row says so: wait for the line before reading them all.
  await worker.waitForLine(/"run completed"/);
  const lines = worker.lines.flatMap((l) => {
    try {
      return [JSON.parse(l) as Record<string, unknown>];
    } catch {
      return [];
    }
  });
  const runLines = lines.filter((l) => JSON.stringify(l).includes(agentRunId) || l.agentRunId !== undefined);
  assert.ok(runLines.length >= 2 * ROUNDS, `${runLines.length} run lines`);
  for (const line of runLines) {
    assert.equal(line.workspaceId, s.workspaceId, JSON.stringify(line));
    assert.equal(line.agentRunId, agentRunId, JSON.stringify(line));
    assert.equal(line.attempt, 1, JSON.stringify(line));
  }
  const withSeq = (msg: string) => runLines.filter((l) => l.msg === msg);
  assert.equal(withSeq('tool round done').length, ROUNDS);
  assert.deepEqual(
    withSeq('checkpoint written').map((l) => l.seq),
    Array.from({ length: ROUNDS }, (_, i) => i + 1),
  );
  // A round's line names the checkpoint it builds on (the one before it).
  assert.deepEqual(
    withSeq('tool round done').map((l) => l.seq),
    Array.from({ length: ROUNDS }, (_, i) => i),
  );
  assert.equal(withSeq('run completed')[0]?.seq, ROUNDS);
});

test('the summary of earlier rounds is the same text for the same rounds, and capped however many there are', () => {
  const history = Array.from({ length: 2_000 }, (_, i) =>
    recordToolCall({
      round: i + 1,
      tool: 'write_file',
      input: { path: `src/file-${i + 1}.ts`, content: 'y'.repeat(5_000) },
      output: { path: `src/file-${i + 1}.ts`, bytes: 5_000, sha256: 'a'.repeat(64) },
    }),
  );
  const summary = summarizeHistoryForPrompt(history);
  assert.equal(summarizeHistoryForPrompt(history), summary);
  assert.ok(summary.length <= MAX_SUMMARY_CHARS + 100, `${summary.length} chars`);
  assert.match(summary, /^- \(earlier calls not listed/);
  assert.match(summary, /- round 2000: write_file .*src\/file-2000\.ts/);
  assert.doesNotMatch(summary, /y{100}/, 'file contents are their size and hash');
  // A short history is listed whole.
  assert.equal(summarizeHistoryForPrompt(history.slice(0, 3)).split('\n').length, 3);
});

test('the summary of earlier rounds is made only when the window moves, from the history as it is then', () => {
  const head = { roleId: 'coder', harness: builtinHarnesses({ WORKER_ALLOWED_COMMANDS: undefined }).code! };
  const call = (round: number) =>
    recordToolCall({
      round,
      tool: 'write_file',
      input: { path: `src/f${round}.ts`, content: `${round}\n` },
      output: { path: `src/f${round}.ts`, bytes: 2, sha256: 'a'.repeat(64) },
    });
  /**
   * Plays `rounds` rounds; each prompt is compared with the one built from the history as it was when the
   * window last moved. Returns the summariser's calls and the window's moves.
   */
  const play = (opts: { rounds: number; resumedAt: number; historyLimit: number }) => {
    let calls = 0;
    const counted = (h: ToolCallRecord[]) => {
      calls++;
      return summarizeHistoryForPrompt(h);
    };
    const window = new ContextWindow(head, 'the brief', KEEP, opts.resumedAt, counted);
    let history = Array.from({ length: opts.resumedAt }, (_, i) => call(i + 1));
    let moved = { through: -1, history };
    let moves = 0;
    for (let i = 0; i <= opts.rounds; i++) {
      const step = opts.resumedAt + i;
      const kept = i < 2 * KEEP ? i : KEEP + ((i - 2 * KEEP) % KEEP);
      const at = { resumedAt: opts.resumedAt, through: step - kept };
      if (at.through !== moved.through) [moved, moves] = [{ through: at.through, history }, moves + 1];
      const prompt = window.prompt(history, step);
      const expected = cachedSystem(buildSystemPrompt(head, moved.history, at));
      assert.deepEqual(prompt.system, expected, `round ${step + 1}`);
      assert.equal(prompt.messages.length, 1 + 2 * kept, `round ${step + 1}: the brief and ${kept} rounds`);
      history.push(call(step + 1));
      history = boundHistory(history, opts.historyLimit); // as each checkpoint does
      window.push([
        { role: 'assistant', content: `call ${step + 1}` },
        { role: 'user', content: `result ${step + 1}` },
      ]);
    }
    return { calls, moves };
  };
  // The window moves KEEP rounds at a time, and only then is the summary made.
  const rounds = 5 * KEEP;
  const whole = play({ rounds, resumedAt: 0, historyLimit: 1_000 });
  assert.deepEqual(whole, { calls: (rounds - 2 * KEEP) / KEEP + 1, moves: (rounds - 2 * KEEP) / KEEP + 2 });
  // Resumed, with a history window shorter than the rounds summarised: it loses a round at every
  // round, and the head still changes only when the window moves.
  const bounded = play({ rounds, resumedAt: 7, historyLimit: KEEP + 2 });
  assert.deepEqual(bounded, { calls: (rounds - 2 * KEEP) / KEEP + 2, moves: (rounds - 2 * KEEP) / KEEP + 2 });
});
