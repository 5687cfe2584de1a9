// Who is asking: a bearer token (the API) or the sign-in cookie (the pages, and the pages'
// own fetches and EventSource). Unknown or missing → 401 (pages: to /login). A token of the
// wrong kind → 403 (pages: an admin goes to /fleet).
import type { Context, MiddlewareHandler } from 'hono';
import { deleteCookie, getCookie, setCookie } from 'hono/cookie';
import type { Sql } from 'postgres';
import { lookupToken, type Principal } from '../../store/tokens.ts';

export const TOKEN_COOKIE = 'emc_token';

export type McEnv = { Variables: { principal: Principal; nonce: string } };
export type McContext = Context<McEnv>;

/** The Authorization header wins when present (a malformed one is not a token); else the cookie. */
export function presentedToken(c: Context): string | undefined {
  const header = c.req.header('authorization');
  if (header !== undefined) return /^Bearer\s+(\S+)\s*$/i.exec(header)?.[1];
  return getCookie(c, TOKEN_COOKIE);
}

export function setSessionCookie(c: Context, token: string): void {
  // HttpOnly: page scripts never see it. SameSite=Strict: no cross-site request carries it.
  setCookie(c, TOKEN_COOKIE, token, { httpOnly: true, sameSite: 'Strict', path: '/' });
}

export function clearSessionCookie(c: Context): void {
  deleteCookie(c, TOKEN_COOKIE, { path: '/' });
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
      return c.redirect('/login', 302);
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
    c.set('principal', principal);
    await next();
  };
}

/** The workspace of the request's principal (routes behind requirePrincipal(need: 'workspace')). */
export function workspaceOf(c: McContext): string {
  const principal = c.get('principal');
  if (principal.kind !== 'workspace') throw new Error('workspace route reached without a workspace principal');
  return principal.workspaceId;
}
