// Server-side HTML with escaping by default: every interpolated value is escaped unless it
// is already SafeHtml (the output of this `html` tag). There is no other way to build markup.

export class SafeHtml {
  constructor(readonly text: string) {}
  toString(): string {
    return this.text;
  }
}

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

export function escapeHtml(value: string): string {
  return value.replace(/[&<>"']/g, (ch) => ESCAPES[ch]!);
}

type Interpolation = SafeHtml | string | number | boolean | null | undefined | readonly Interpolation[];

function render(value: Interpolation): string {
  if (value === null || value === undefined || value === false) return '';
  if (value instanceof SafeHtml) return value.text;
  if (Array.isArray(value)) return value.map(render).join('');
  return escapeHtml(String(value));
}

export function html(strings: TemplateStringsArray, ...values: Interpolation[]): SafeHtml {
  let out = strings[0]!;
  values.forEach((value, i) => {
    out += render(value) + strings[i + 1]!;
  });
  return new SafeHtml(out);
}

/** Trusted text produced by this program (the inline CSS and script), never user data. */
export function trusted(text: string): SafeHtml {
  return new SafeHtml(text);
}

// ------------------------------------------------------------------ formatting
// The inline script formats the same way (see client-script.ts), so live updates match.

export function formatTime(date: Date | null): string {
  return date ? `${date.toISOString().replace('T', ' ').slice(0, 19)} UTC` : '—';
}

export function formatAge(date: Date | null, now = Date.now()): string {
  if (!date) return '';
  const seconds = Math.round((now - date.getTime()) / 1000);
  const abs = Math.abs(seconds);
  if (abs < 2) return 'just now';
  const span =
    abs < 90
      ? `${abs} s`
      : abs < 5400
        ? `${Math.round(abs / 60)} min`
        : abs < 172800
          ? `${Math.round(abs / 3600)} h`
          : `${Math.round(abs / 86400)} d`;
  return seconds >= 0 ? `${span} ago` : `in ${span}`;
}

/** A timestamp with its live-updating age; `field` names it for the live script. */
export function timeCell(date: Date | null, field?: string, testid?: string): SafeHtml {
  const iso = date ? date.toISOString() : '';
  return html`<span
    class="when"
    data-iso="${iso}"
    ${field ? html` data-field="${field}"` : ''}${testid ? html` data-testid="${testid}"` : ''}
    ><time datetime="${iso}">${formatTime(date)}</time><small class="age">${formatAge(date)}</small></span
  >`;
}

export function statusBadge(status: string, field = 'status'): SafeHtml {
  return html`<span class="badge status-${status}" data-field="${field}">${status}</span>`;
}

export function shortOid(oid: string | null, length = 10): string {
  return oid ? oid.slice(0, length) : '—';
}
