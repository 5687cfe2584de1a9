// Who is asking: a bearer token (the API) or the sign-in cookie (the pages, and the pages'
// own fetches and EventSource). Unknown or missing → 401 (pages: to /login). A token of the
// wrong kind → 403 (pages: an admin goes to /fleet). A read-only token → 403 on every write
// (any method but GET/HEAD), whatever the route: the check lives here, in the one middleware
// every authenticated route goes through.
import type { Context, MiddlewareHandler } from 'hono';
import { deleteCookie, getCookie, setCookie } from 'hono/cookie';
import type { Sql } from 'postgres';
import { lookupToken, type Principal } from '../store/tokens.ts';
import { sendPage } from './layout.ts';
import type { McContext, McEnv } from './context.ts';
import { messageContent } from './pages-admin.ts';

export const TOKEN_COOKIE = 'emc_token';
/** A sign-in lasts at most this long (less when the token expires sooner). */
export const SESSION_MAX_AGE_S = 12 * 60 * 60;

/** The Authorization header wins when present (a malformed one is not a token); else the cookie. */
export function presentedToken(c: Context): string | undefined {
  const header = c.req.header('authorization');
  if (header !== undefined) return /^Bearer\s+(\S+)\s*$/i.exec(header)?.[1];
  return getCookie(c, TOKEN_COOKIE);
}

/** Served over https: directly, or behind a proxy that says so (we listen on loopback only, so a proxy is the only client that can). */
export function isHttps(c: Context): boolean {
  const forwarded = c.req.header('x-forwarded-proto')?.split(',')[0]?.trim().toLowerCase();
  return forwarded === 'https' || new URL(c.req.url).protocol === 'https:';
}

export function setSessionCookie(c: Context, token: string, expiresAt?: Date | null): void {
  // HttpOnly: page scripts never see it. SameSite=Strict: no cross-site request carries it.
  // Secure over https; Max-Age so a sign-in ends, never after the token itself.
  const untilExpiry = expiresAt ? Math.floor((expiresAt.getTime() - Date.now()) / 1000) : Infinity;
  const maxAge = Math.max(1, Math.min(SESSION_MAX_AGE_S, untilExpiry));
  setCookie(c, TOKEN_COOKIE, token, { httpOnly: true, sameSite: 'Strict', path: '/', maxAge, secure: isHttps(c) });
}

export function clearSessionCookie(c: Context): void {
  deleteCookie(c, TOKEN_COOKIE, { path: '/' });
}

/** The shape of every id a job may carry (core/job.ts): anything else cannot exist. */
const ID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$/;
const ID_PARAMS: Record<string, string> = { convoyId: 'convoy', agentRunId: 'run' };

/**
 * A malformed id in the path (NUL, a lone surrogate, a slash, 10 kB) is not found, like any id
 * that does not exist, and never reaches the database. Checked after the token, so a request
 * without one is still 401.
 */
function malformedIdResponse(c: McContext, surface: AuthRule['surface']): Response | Promise<Response> | undefined {
  for (const [name, value] of Object.entries(c.req.param() as Record<string, string>)) {
    const what = ID_PARAMS[name];
    if (!what || ID.test(value)) continue;
    const message = `${what} not found`;
    return surface === 'api'
      ? c.json({ error: 'not_found', message }, 404)
      : sendPage(c, { title: 'Not found', content: messageContent('Not found', message) }, 404);
  }
  return undefined;
}

/**
 * Only a path of this server may be returned to after sign-in: one leading slash (not `//host`
 * or `/\\host`, which a browser reads as another site), no control characters.
 */
export function safeReturnPath(value: unknown): string | undefined {
  if (typeof value !== 'string' || value.length > 2000) return undefined;
  return /^\/(?![\/\\])[^\s\\]*$/.test(value) && !/[\x00-\x1f]/.test(value) ? value : undefined;
}

/** /login, remembering the page asked for (a GET page; the live script's fragments are not pages). */
function loginUrlFor(c: McContext): string {
  const url = new URL(c.req.url);
  url.searchParams.delete('fragment');
  const asked = `${url.pathname}${url.search}`;
  return c.req.method === 'GET' && asked !== '/' && safeReturnPath(asked)
    ? `/login?next=${encodeURIComponent(asked)}`
    : '/login';
}

export interface AuthRule {
  surface: 'api' | 'html';
  need: Principal['kind'];
  /** Renders the HTML 403 page (admin pages opened with a workspace token). */
  forbiddenPage?: (c: McContext) => Response | Promise<Response>;
}

export function requirePrincipal(admin: Sql, rule: AuthRule): MiddlewareHandler<McEnv> {
  return async (c, next) => {
    const token = presentedToken(c);
    const principal = await lookupToken(admin, token);
    if (!principal) {
      if (rule.surface === 'api') {
        c.header('WWW-Authenticate', 'Bearer realm="mission-control"');
        return c.json({ error: 'unauthorized', message: 'a valid bearer token is required' }, 401);
      }
      if (token && !c.req.header('authorization')) clearSessionCookie(c);
      return c.redirect(loginUrlFor(c), 302);
    }
    if (principal.kind !== rule.need) {
      if (rule.surface === 'html' && principal.kind === 'admin') return c.redirect('/fleet', 302);
      if (rule.surface === 'html' && rule.forbiddenPage) return rule.forbiddenPage(c);
      const message =
        rule.need === 'admin'
          ? 'this needs an admin token (token create --admin)'
          : 'an admin token reads the fleet only; workspace data needs a workspace token';
      return c.json({ error: 'forbidden', message }, 403);
    }
    if (principal.readOnly && c.req.method !== 'GET' && c.req.method !== 'HEAD') {
      return c.json({ error: 'forbidden', message: 'this token is read-only' }, 403);
    }
    c.set('principal', principal);
    const malformed = malformedIdResponse(c, rule.surface);
    if (malformed) return malformed;
    await next();
  };
}

/** The workspace of the request's principal (routes behind requirePrincipal(need: 'workspace')). */
export function workspaceOf(c: McContext): string {
  const principal = c.get('principal');
  if (principal.kind !== 'workspace') throw new Error('workspace route reached without a workspace principal');
  return principal.workspaceId;
}
