// The run filter as the page's form and the JSON API spell it in the query string:
// status, convoy, q, worker, host, model, branch, from and to (created), finishedFrom and finishedTo
// (ISO dates or times), limit, cursor. One parser for both, so the HTML list and GET /api/runs
// always agree on what a filter means. The convoy list's filter (q, status) is read the same way.
import type { ConvoyFilter } from '../store/mission-control.ts';
import { MAX_PAGE, RUN_STATUS_FILTERS, type RunFilter, type RunStatusFilter } from '../store/run-search.ts';

export interface RunQuery {
  filter: RunFilter;
  cursor: string | null;
  limit: number;
}

export type ParsedRunQuery = { ok: true; query: RunQuery } | { ok: false; message: string };

const DEFAULT_LIMIT = 50;

function instant(text: string | undefined, name: string, problems: string[]): Date | undefined {
  if (!text) return undefined;
  const date = new Date(text);
  if (Number.isNaN(date.getTime())) problems.push(`${name} must be a date or time (ISO 8601)`);
  return date;
}

/** `get` reads one query parameter; empty values mean "not filtered". */
export function parseRunQuery(get: (name: string) => string | undefined): ParsedRunQuery {
  const problems: string[] = [];
  const value = (name: string) => get(name)?.trim() || undefined;
  const status = value('status');
  if (status && !RUN_STATUS_FILTERS.includes(status as RunStatusFilter)) {
    problems.push(`status must be one of ${RUN_STATUS_FILTERS.join(', ')}`);
  }
  const limitText = value('limit');
  const limit = limitText === undefined ? DEFAULT_LIMIT : Number(limitText);
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_PAGE) {
    problems.push(`limit must be an integer from 1 to ${MAX_PAGE}`);
  }
  const q = value('q');
  if (q && q.length > 200) problems.push('q is limited to 200 characters');
  const filter: RunFilter = {
    status: status as RunStatusFilter | undefined,
    convoy: value('convoy'),
    q,
    worker: value('worker'),
    host: value('host'),
    model: value('model'),
    branch: value('branch'),
    createdFrom: instant(value('from'), 'from', problems),
    createdTo: instant(value('to'), 'to', problems),
    finishedFrom: instant(value('finishedFrom'), 'finishedFrom', problems),
    finishedTo: instant(value('finishedTo'), 'finishedTo', problems),
  };
  if (problems.length) return { ok: false, message: problems.join('; ') };
  return { ok: true, query: { filter, cursor: value('cursor') ?? null, limit } };
}

/** The query string of `filter` (and a cursor), for "older" links that keep the filter. */
export function runQueryString(filter: RunFilter, cursor?: string | null): string {
  const params = new URLSearchParams();
  if (filter.status) params.set('status', filter.status);
  if (filter.convoy) params.set('convoy', filter.convoy);
  if (filter.q) params.set('q', filter.q);
  for (const name of ['worker', 'host', 'model', 'branch'] as const) {
    const text = filter[name];
    if (text) params.set(name, text);
  }
  if (filter.createdFrom) params.set('from', filter.createdFrom.toISOString());
  if (filter.createdTo) params.set('to', filter.createdTo.toISOString());
  if (filter.finishedFrom) params.set('finishedFrom', filter.finishedFrom.toISOString());
  if (filter.finishedTo) params.set('finishedTo', filter.finishedTo.toISOString());
  if (cursor) params.set('cursor', cursor);
  const text = params.toString();
  return text ? `?${text}` : '';
}

/**
 * A timeline page's cursor (`before` on the run page, `cursor` in the checkpoints API): the seq of the
 * checkpoint the page is older than; absent or empty, the newest page.
 */
export function parseSeqCursor(text: string | undefined): { ok: true; before: number | null } | { ok: false } {
  if (!text) return { ok: true, before: null };
  return /^[1-9][0-9]{0,9}$/.test(text) ? { ok: true, before: Number(text) } : { ok: false };
}

export interface ConvoyQuery {
  filter: ConvoyFilter;
  cursor: string | null;
  limit: number;
}

export type ParsedConvoyQuery = { ok: true; query: ConvoyQuery } | { ok: false; message: string };

/** The convoy list's filter (q, status), limit and cursor, for the home page and GET /api/convoys alike. */
export function parseConvoyQuery(get: (name: string) => string | undefined): ParsedConvoyQuery {
  const value = (name: string) => get(name)?.trim() || undefined;
  const problems: string[] = [];
  const status = value('status');
  if (status && !RUN_STATUS_FILTERS.includes(status as RunStatusFilter)) {
    problems.push(`status must be one of ${RUN_STATUS_FILTERS.join(', ')}`);
  }
  const q = value('q');
  if (q && q.length > 200) problems.push('q is limited to 200 characters');
  const limitText = value('limit');
  const limit = limitText === undefined ? DEFAULT_LIMIT : Number(limitText);
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_PAGE) {
    problems.push(`limit must be an integer from 1 to ${MAX_PAGE}`);
  }
  if (problems.length) return { ok: false, message: problems.join('; ') };
  const filter: ConvoyFilter = { q, status: status as RunStatusFilter | undefined };
  return { ok: true, query: { filter, cursor: value('cursor') ?? null, limit } };
}

/** The home page's query string for `filter` (and a cursor), so "Older" keeps the filter. */
export function convoyQueryString(filter: ConvoyFilter, cursor?: string | null): string {
  const params = new URLSearchParams();
  if (filter.q) params.set('q', filter.q);
  if (filter.status) params.set('status', filter.status);
  if (cursor) params.set('cursor', cursor);
  const text = params.toString();
  return text ? `?${text}` : '';
}
