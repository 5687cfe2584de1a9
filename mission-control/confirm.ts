// The second step of a destructive panel action (Cancel, Remove): the first POST answers with
// this page, which says what will happen and posts the same form again with confirmed=yes.
// It needs no script, so a page without the live script confirms the same way.
import type { McContext } from './context.ts';
import { html, type SafeHtml } from './html.ts';
import { sendPage } from './layout.ts';

export interface Confirmation {
  title: string;
  /** What the action does, in one or two sentences. */
  consequence: string;
  /** Where the confirmed form posts (the same action as the first step). */
  action: string;
  csrf: string;
  /** Where "Keep it" goes back to. */
  back: string;
  button: string;
  /** What the action would change, shown under the consequence (the fork preview's files). */
  details?: SafeHtml;
  /** Other form fields the action needs, posted again as they came. */
  fields?: Record<string, string>;
}

/** Whether the form is the confirmed second step. */
export function isConfirmed(form: Record<string, unknown>): boolean {
  return form.confirmed === 'yes';
}

function confirmContent(k: Confirmation): SafeHtml {
  return html`<h1>${k.title}</h1>
    <div class="confirm" data-testid="confirm">
      <p>${k.consequence}</p>
      ${k.details ?? ''}
      <form class="action" method="post" action="${k.action}">
        <input type="hidden" name="_csrf" value="${k.csrf}" />
        <input type="hidden" name="confirmed" value="yes" />${Object.entries(k.fields ?? {}).map(
          ([name, value]) => html`<input type="hidden" name="${name}" value="${value}" />`,
        )}<button type="submit" class="danger" data-testid="confirm-yes">${k.button}</button>
      </form>
      <a href="${k.back}" data-testid="confirm-no">Keep it</a>
    </div>`;
}

export function sendConfirmation(c: McContext, who: string, k: Confirmation): Response {
  return sendPage(c, { title: k.title, who, content: confirmContent(k) });
}
