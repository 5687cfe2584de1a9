// The page frame: header, inline stylesheet, and the inline live script (allowed by nonce).
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import type { McContext } from './context.ts';
import { CLIENT_SCRIPT } from './client-script.ts';
import { html, trusted, type SafeHtml } from './html.ts';
import { STYLES } from './styles.ts';

export interface LiveFeed {
  /** SSE endpoint the page listens on. */
  events: string;
  /** JSON the page re-fetches on a change (convoy panel); absent: the page re-renders <main>. */
  json?: string;
  /** Only changes of this convoy / run concern the page. */
  convoy?: string;
  run?: string;
}

export interface PageOptions {
  title: string;
  nonce: string;
  /** "workspace acme" or "admin"; absent on the sign-in page. */
  who?: string;
  live?: LiveFeed;
  content: SafeHtml;
}

/** The Content-Security-Policy matching `page`: only our own inline style and nonce'd script. */
export function contentSecurityPolicy(nonce: string): string {
  return [
    "default-src 'none'",
    `script-src 'nonce-${nonce}'`,
    `style-src 'nonce-${nonce}'`,
    "connect-src 'self'",
    "img-src 'self' data:",
    "form-action 'self'",
    "base-uri 'none'",
    "frame-ancestors 'none'",
  ].join('; ');
}

export function page(options: PageOptions): string {
  const { live, nonce } = options;
  const bodyAttributes = live
    ? html` data-events="${live.events}" data-json="${live.json ?? ''}" data-convoy="${live.convoy ?? ''}"
      data-run="${live.run ?? ''}"`
    : '';
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${options.title} · echodo mission control</title>
<style nonce="${nonce}">${trusted(STYLES)}</style>
</head>
<body${bodyAttributes}>
<header class="top">
  <a class="brand" href="/">echodo mission control</a>
  ${options.who ? html`<span class="who" data-testid="who">${options.who}</span>` : ''}
  <span class="spacer"></span>
  ${live ? html`<span class="live" data-testid="live-status" data-state="connecting">connecting…</span>` : ''}
  ${options.who ? html`<form method="post" action="/logout"><button type="submit">Sign out</button></form>` : ''}
</header>
<main>
${options.content}
</main>
${
  live
    ? html`<script nonce="${nonce}">
        ${trusted(CLIENT_SCRIPT)};
      </script>`
    : ''
}
</body>
</html>`.text;
}

/**
 * Responds with a page under its CSP; the nonce was made for this request (see server.ts).
 * `?fragment=main` returns only what goes inside <main>: the live script swaps it in.
 */
export function sendPage(
  c: McContext,
  options: Omit<PageOptions, 'nonce'>,
  status: ContentfulStatusCode = 200,
): Response {
  if (c.req.query('fragment') === 'main') {
    c.header('Content-Security-Policy', "default-src 'none'"); // opened on its own, it may run nothing
    return c.html(options.content.text, status);
  }
  const nonce = c.get('nonce');
  c.header('Content-Security-Policy', contentSecurityPolicy(nonce));
  return c.html(page({ ...options, nonce }), status);
}
