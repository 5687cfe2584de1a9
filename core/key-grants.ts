// Key grants: besides matching WORKER_PROVIDER_KEY_VARS (key-vars.ts), a variable a provider row
// names must be granted by the operator to that row's workspace, and its value goes only to the
// hosts of the grant. Without this, any workspace could name the host's key (or another tenant's)
// and point its own base URL at a listener of its own. Checked when a row is written and again
// before every request that would carry the key.
import { EchodoError } from './errors.ts';

export interface KeyGrant {
  variable: string;
  /** Hosts the key may be sent to ("api.example.com" or "127.0.0.1:8080"); empty: any host. */
  hosts: readonly string[];
}

const HOST = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?)(:[0-9]{1,5})?$/;

/** A host as granted: lower case, hostname with an optional port; throws on anything else. */
export function normalizeGrantHost(host: string): string {
  const h = host.trim().toLowerCase();
  if (!HOST.test(h)) {
    throw new EchodoError('invalid_job', `host ${JSON.stringify(host)} is not a host name or host:port`);
  }
  return h;
}

/** A grant host names a URL's host when it is its hostname (any port) or its host:port. */
export function hostGranted(grant: KeyGrant, url: URL): boolean {
  if (grant.hosts.length === 0) return true;
  const hostname = url.hostname.toLowerCase();
  const host = url.host.toLowerCase();
  // URL.host leaves the default port out: spell it out so "h:443" matches https://h/.
  const port = url.port || (url.protocol === 'https:' ? '443' : url.protocol === 'http:' ? '80' : '');
  return grant.hosts.some((h) => h === hostname || h === host || h === `${hostname}:${port}`);
}

export class KeyNotGrantedError extends EchodoError {
  constructor(
    readonly variable: string,
    message: string,
  ) {
    super('model_unknown', message);
    this.name = 'KeyNotGrantedError';
  }
}

/**
 * Throws KeyNotGrantedError, naming the variable, unless `grant` (the workspace's grant of it)
 * exists and allows `url`'s host.
 */
export function assertKeyGranted(
  variable: string,
  grant: KeyGrant | undefined,
  url: string | URL,
  workspace?: string,
): void {
  const where = workspace ? ` to workspace ${workspace}` : ' to this workspace';
  if (!grant || grant.variable !== variable) {
    throw new KeyNotGrantedError(
      variable,
      `api_key_env_var ${variable} is not granted${where} (an operator grants it: npm run workspace -- key grant ` +
        `--workspace W ${variable} [--host H])`,
    );
  }
  let parsed: URL;
  try {
    parsed = typeof url === 'string' ? new URL(url) : url;
  } catch {
    throw new KeyNotGrantedError(variable, `api_key_env_var ${variable}: the provider's URL is not a URL`);
  }
  if (!hostGranted(grant, parsed)) {
    throw new KeyNotGrantedError(
      variable,
      `api_key_env_var ${variable} is granted${where} only for ${grant.hosts.join(', ')}, not for host ${parsed.host}`,
    );
  }
}
