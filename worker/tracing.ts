// OpenTelemetry traces of the worker: a span per run attempt, per round, per checkpoint phase
// (commit, row, note) and per resume, so a slow checkpoint can be found in an operator's own tracing.
// Exported over OTLP/HTTP only when OTEL_EXPORTER_OTLP_ENDPOINT is set; the SDK is loaded only then.
// Without it the API's no-op tracer answers: a span is a shared object that records nothing.
// Attributes are ids, counts and kinds: never a path, a file's contents, a brief or a secret.
import { context, SpanStatusCode, trace, type Attributes, type Span } from '@opentelemetry/api';
import { EchodoError } from '../core/errors.ts';

const tracer = () => trace.getTracer('echodo-worker');

/**
 * Runs fn in a span (the parent: the active one); an error ends it with status error and its code
 * (not its message, which may name a path).
 */
export async function inSpan<T>(name: string, attributes: Attributes, fn: (span: Span) => Promise<T>): Promise<T> {
  return tracer().startActiveSpan(name, { attributes }, async (span) => {
    try {
      return await fn(span);
    } catch (err) {
      span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof EchodoError ? err.code : 'error' });
      throw err;
    } finally {
      span.end();
    }
  });
}

/** A span begun now and ended by the caller (a round, which ends in a callback of the model loop). */
export function beginSpan(name: string, attributes: Attributes): Span {
  return tracer().startSpan(name, { attributes }, context.active());
}

/** Records a phase that already ran (start and end known), under the active span. */
export function recordSpan(name: string, attributes: Attributes, startMs: number, endMs: number): void {
  const origin = performance.timeOrigin;
  tracer()
    .startSpan(name, { attributes, startTime: origin + startMs }, context.active())
    .end(origin + endMs);
}

/** Starts exporting to `endpoint` (its /v1/traces, OTLP/HTTP JSON); shutdown() flushes what is left. */
export async function startTracing(endpoint: string): Promise<{ shutdown(): Promise<void> }> {
  const [{ BasicTracerProvider, BatchSpanProcessor }, { OTLPTraceExporter }, { resourceFromAttributes }, hooks] =
    await Promise.all([
      import('@opentelemetry/sdk-trace-base'),
      import('@opentelemetry/exporter-trace-otlp-http'),
      import('@opentelemetry/resources'),
      import('@opentelemetry/context-async-hooks'),
    ]);
  const exporter = new OTLPTraceExporter({ url: `${endpoint.replace(/\/+$/, '')}/v1/traces` });
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({ 'service.name': 'echodo-worker' }),
    spanProcessors: [new BatchSpanProcessor(exporter)],
  });
  context.setGlobalContextManager(new hooks.AsyncLocalStorageContextManager().enable());
  trace.setGlobalTracerProvider(provider);
  return { shutdown: () => provider.shutdown() };
}
