// A real git transport over HTTP for tests: git's smart HTTP (`git http-backend`, run as a CGI by
// a node:http server on 127.0.0.1) serving the bare repositories under a base path, the transport
// hosted remotes speak. With `credentials`, every request must carry them (HTTP Basic, as git
// sends a URL's user and password); others get 401. Every request it serves may push (http-backend
// enables receive-pack when REMOTE_USER is set), as git daemon's --enable=receive-pack.
import { spawn } from 'node:child_process';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface GitHttpServer {
  port: number;
  /** http://[user:password@]127.0.0.1:<port>/<name> */
  url(name: string, options?: { withCredentials?: boolean }): string;
  /** Requests answered, by outcome: 'denied' (401) or the git service they asked for. */
  counts: Record<string, number>;
  stop(): Promise<void>;
}

/** The service a smart-HTTP request is for (git-upload-pack or git-receive-pack), or 'other'. */
function serviceOf(url: URL): string {
  const named = url.searchParams.get('service') ?? url.pathname.split('/').at(-1) ?? '';
  return /^git-(upload|receive)-pack$/.test(named) ? named : 'other';
}

/** Copies a CGI response (headers, a blank line, the body) onto the HTTP response. */
function relayCgi(cgi: ReturnType<typeof spawn>, res: ServerResponse): void {
  let head: Buffer = Buffer.alloc(0);
  let headersSent = false;
  cgi.stdout!.on('data', (chunk: Buffer) => {
    if (headersSent) return void res.write(chunk);
    head = Buffer.concat([head, chunk]);
    const end = head.indexOf('\r\n\r\n');
    if (end < 0) return;
    headersSent = true;
    let status = 200;
    for (const line of head.subarray(0, end).toString('latin1').split('\r\n')) {
      const colon = line.indexOf(':');
      const name = line.slice(0, colon).trim();
      const value = line.slice(colon + 1).trim();
      if (name.toLowerCase() === 'status') status = Number.parseInt(value, 10);
      else res.setHeader(name, value);
    }
    res.writeHead(status);
    res.write(head.subarray(end + 4));
  });
  cgi.stdout!.on('end', () => {
    if (!headersSent) res.writeHead(502);
    res.end();
  });
}

export async function startGitHttpServer(
  basePath: string,
  credentials?: { user: string; password: string },
): Promise<GitHttpServer> {
  const counts: Record<string, number> = {};
  const count = (key: string) => (counts[key] = (counts[key] ?? 0) + 1);
  const expected =
    credentials && `Basic ${Buffer.from(`${credentials.user}:${credentials.password}`).toString('base64')}`;
  const handle = (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', 'http://127.0.0.1');
    if (expected && req.headers.authorization !== expected) {
      count('denied');
      res.writeHead(401, { 'WWW-Authenticate': 'Basic realm="echodo test remote"' }).end();
      return;
    }
    count(serviceOf(url));
    const env: NodeJS.ProcessEnv = {
      PATH: process.env.PATH,
      GIT_PROJECT_ROOT: basePath,
      GIT_HTTP_EXPORT_ALL: '1',
      GIT_CONFIG_NOSYSTEM: '1',
      REQUEST_METHOD: req.method,
      PATH_INFO: decodeURIComponent(url.pathname),
      QUERY_STRING: url.search.slice(1),
      CONTENT_TYPE: req.headers['content-type'] ?? '',
      REMOTE_ADDR: '127.0.0.1',
      REMOTE_USER: credentials?.user ?? 'anonymous',
      ...(req.headers['git-protocol'] ? { GIT_PROTOCOL: String(req.headers['git-protocol']) } : {}),
      ...(req.headers['content-encoding'] ? { HTTP_CONTENT_ENCODING: String(req.headers['content-encoding']) } : {}),
    };
    const cgi = spawn('git', ['http-backend'], { env, stdio: ['pipe', 'pipe', 'ignore'] });
    cgi.on('error', () => res.destroy());
    cgi.stdin.on('error', () => {}); // the backend may answer (and exit) before reading the whole body
    req.pipe(cgi.stdin);
    relayCgi(cgi, res);
  };
  const server = createServer(handle);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const userinfo = credentials
    ? `${encodeURIComponent(credentials.user)}:${encodeURIComponent(credentials.password)}@`
    : '';
  return {
    port,
    url: (name, options) => `http://${options?.withCredentials === false ? '' : userinfo}127.0.0.1:${port}/${name}`,
    counts,
    stop: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
