// The Test of a remote harness: one AG-UI run with no tools, so whatever the agent answers, nothing
// is executed. Ok when the agent finishes the run within the time; otherwise the reason, redacted.
import { randomUUID } from 'node:crypto';
import { assertKeyGranted, type KeyGrant } from '../../core/key-grants.ts';
import { assertKeyVarAllowed } from '../../core/key-vars.ts';
import { errorMessage } from '../../core/errors.ts';
import { runAgUi, safeReason } from './ag-ui-client.ts';

export const PROBE_TIMEOUT_MS = 10_000;

export type ProbeResult =
  { ok: true; latencyMs: number; events: number } | { ok: false; latencyMs: number; error: string };

export async function probeAgUiEndpoint(
  target: { url: string; keyEnvVar: string | null },
  options: { keyGrant?: KeyGrant; keyVarGlobs?: readonly string[]; env?: NodeJS.ProcessEnv; timeoutMs?: number } = {},
): Promise<ProbeResult> {
  const started = performance.now();
  const latency = () => Math.round(performance.now() - started);
  let events = 0;
  try {
    let bearer: string | undefined;
    if (target.keyEnvVar) {
      assertKeyVarAllowed(target.keyEnvVar, options.keyVarGlobs);
      assertKeyGranted(target.keyEnvVar, options.keyGrant, target.url);
      bearer = (options.env ?? process.env)[target.keyEnvVar];
      if (!bearer) return { ok: false, latencyMs: latency(), error: `${target.keyEnvVar} is not set` };
    }
    const id = randomUUID();
    await runAgUi({
      url: target.url,
      input: {
        threadId: `probe-${id}`,
        runId: `probe-${id}`,
        tools: [],
        context: [],
        state: {},
        forwardedProps: {},
        messages: [{ id: 'probe', role: 'user', content: 'Reply with: ok' }],
      },
      bearer,
      timeoutMs: options.timeoutMs ?? PROBE_TIMEOUT_MS,
      onEvent: () => void events++,
    });
    return { ok: true, latencyMs: latency(), events };
  } catch (err) {
    return { ok: false, latencyMs: latency(), error: safeReason(errorMessage(err)) };
  }
}
