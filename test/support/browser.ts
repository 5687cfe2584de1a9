// Chromium for the panel tests: the system's (npm test's preflight installs it; a missing one stops
// the suite before it starts, never skips a test), quiet, and signed in the way an operator is.
import { chromium, type Browser, type Page } from 'playwright-core';

export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: process.env.ECHODO_CHROMIUM ?? '/usr/bin/chromium',
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--no-first-run',
      '--disable-quic',
    ],
  });
}

/** Signs in on /login with a token and waits for the home page. */
export async function signInAt(page: Page, baseUrl: string, token: string): Promise<void> {
  await page.goto(`${baseUrl}/login`);
  await page.fill('#token', token);
  await Promise.all([page.waitForURL(`${baseUrl}/`), page.click('button[type=submit]')]);
}
