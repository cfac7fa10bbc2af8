// Drives the approval console of a running `portcullis serve --console` in headless Chromium:
// an escalated tool call through the real HTTP API, sign-in, approval and refusal with the
// keyboard, the decision feed, the phone-width layout, and that the page neither runs the
// text it shows nor talks to any other host.
//
//     node console.mjs <base-url> <token>
//
// Chromium is Debian's (/usr/bin/chromium, or PORTCULLIS_CHROMIUM); playwright-core downloads
// no browser. Exits non-zero on the first failed check.

import assert from 'node:assert/strict';
import process from 'node:process';
import { chromium } from 'playwright-core';

const [base, token] = process.argv.slice(2);
if (!base || !token) {
  console.error('usage: node console.mjs <base-url> <token>');
  process.exit(2);
}
const origin = new URL(base).origin;
const executablePath = process.env.PORTCULLIS_CHROMIUM || '/usr/bin/chromium';
const APPROVER = 'Erin Approver';
const POLICY = 'ask_before_email';
const REASON = 'email leaves the company';
const HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned=2">';
const CALL = {
  tool_name: 'send_email',
  arguments: { to: 'bob@example.com', body: HOSTILE },
  calling_message: { role: 'assistant', content: 'Sending.' },
  metadata: { agent_id: 'mailer', session_id: 's-1', timestamp: '2026-01-01T00:00:00Z' },
};
const WAIT = { timeout: 8000 };

// The whole run is bounded: a hung page fails the test instead of stalling it.
setTimeout(() => {
  console.error('console test: timed out after 150 s');
  process.exit(1);
}, 150_000).unref();

function step(name) {
  console.log('-- ' + name);
}

/** The tool call through the service's HTTP API, as an agent would send it. */
async function evaluate(call) {
  const response = await fetch(base + '/v1/evaluate/tool_call', {
    method: 'POST',
    headers: { Authorization: 'Bearer ' + token, 'Content-Type': 'application/json' },
    body: JSON.stringify(call),
  });
  const text = await response.text();
  let answer;
  try {
    answer = JSON.parse(text);
  } catch {
    assert.fail(`/v1/evaluate/tool_call answered ${response.status} with no JSON: ${text}`);
  }
  return { status: response.status, answer };
}

async function expectOutcome(call, outcome) {
  const { status, answer } = await evaluate(call);
  assert.equal(answer.outcome, outcome,
    `expected ${outcome}, the service answered ${status}: ${JSON.stringify(answer)}`);
  return answer;
}

async function activeElement(page) {
  return page.evaluate(() => {
    const e = document.activeElement;
    return e ? { tag: e.tagName, text: (e.textContent || '').trim(), label: e.labels?.[0]?.textContent ?? null } : null;
  });
}

async function main() {
  const browser = await chromium.launch({
    executablePath,
    headless: true,
    args: process.getuid && process.getuid() === 0 ? ['--no-sandbox'] : [],
  });
  try {
    await run(browser);
  } finally {
    await browser.close();
  }
}

async function run(browser) {
  const context = await browser.newContext({ viewport: { width: 1024, height: 900 } });
  const page = await context.newPage();
  const requests = [];
  const decisions = [];
  const problems = [];
  page.on('request', (request) => {
    requests.push(request.url());
    const url = new URL(request.url());
    if (request.method() === 'POST' && url.pathname.startsWith('/v1/approvals/')) {
      decisions.push({
        path: url.pathname,
        contentType: request.headers()['content-type'],
        authorization: request.headers()['authorization'],
        body: JSON.parse(request.postData() || 'null'),
      });
    }
  });
  page.on('pageerror', (error) => problems.push('page error: ' + error.message));
  page.on('console', (message) => {
    // A blocked script, style or connection is a page the Content-Security-Policy broke.
    if (/Content Security Policy/i.test(message.text())) problems.push(message.text());
  });

  step('a tool call that escalates, through the HTTP API');
  const first = await expectOutcome(CALL, 'approval_required');
  assert.equal(typeof first.approval?.id, 'string', JSON.stringify(first));

  step('the console page and its headers');
  const response = await page.goto(base + '/console');
  assert.equal(response.status(), 200);
  const policy = response.headers()['content-security-policy'] || '';
  assert.match(policy, /script-src 'self'/, 'the page is served with its Content-Security-Policy');

  step('a wrong token is refused and sends the approver back to sign in');
  await page.getByLabel('Your name').focus();
  await page.keyboard.type(APPROVER);
  await page.keyboard.press('Tab');
  await page.keyboard.type('not-the-token');
  await page.keyboard.press('Enter');
  await page.locator('#sign-in-message').filter({ hasText: /refused/i }).waitFor(WAIT);
  assert.ok(await page.getByLabel('Service token').isVisible());

  step('sign in with the keyboard');
  // The name is kept; the token field has the focus.
  assert.equal(await page.getByLabel('Your name').inputValue(), APPROVER);
  assert.equal((await activeElement(page))?.label, 'Service token');
  await page.keyboard.type(token);
  await page.keyboard.press('Enter');
  const pending = page.locator('#pending > li');
  const item = pending.filter({ hasText: 'send_email' });
  await item.first().waitFor(WAIT);
  assert.equal(await item.count(), 1, 'one pending request for the e-mail');
  assert.equal(await page.locator('#pending').getAttribute('aria-live'), 'polite');

  step('the pending request shows the exact action, as text');
  const text = await item.innerText();
  for (const expected of ['send_email', 'bob@example.com', POLICY, REASON, 'mailer', 's-1']) {
    assert.ok(text.includes(expected), `the pending request shows ${expected}:\n${text}`);
  }
  assert.ok(text.includes('<script>window.__pwned = 1</script><img src=x onerror='),
    `the arguments show as literal text:\n${text}`);
  assert.equal(await page.evaluate(() => window.__pwned), undefined, 'no argument ran');
  assert.equal(await page.locator('img[src="x"]').count(), 0, 'no argument became an element');
  assert.equal(await page.locator('script').count(), 1, 'only the console script is a script');
  assert.ok(await item.locator('time').count() >= 1, 'the request time is a <time>');

  step('approve with the keyboard only');
  const validity = item.getByLabel('Valid for');
  await validity.focus();
  await page.keyboard.press('ArrowUp'); // from 15 minutes to 5 minutes
  const ttl = await validity.inputValue();
  assert.equal(ttl, '5m', 'the arrow key chose the shorter validity');
  await page.keyboard.press('Tab');
  assert.deepEqual(
    { tag: (await activeElement(page))?.tag, text: (await activeElement(page))?.text },
    { tag: 'BUTTON', text: 'Approve' });
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => document.querySelectorAll('#pending > li').length === 0,
    null, WAIT);
  await page.locator('#done').filter({ hasText: 'Approved' }).waitFor(WAIT);
  const grant = decisions.at(-1);
  assert.ok(grant, 'the grant was posted');
  assert.equal(grant.path, `/v1/approvals/${encodeURIComponent(first.approval.id)}/grant`);
  assert.deepEqual(grant.body, { by: APPROVER, ttl });
  assert.match(grant.contentType ?? '', /^application\/json/);
  assert.equal(grant.authorization, 'Bearer ' + token);
  assert.equal(await page.locator('#alert').innerText(), '', 'no error was shown');

  step('the approved call goes through once, then needs approval again');
  await expectOutcome(CALL, 'allowed');
  const third = await expectOutcome(CALL, 'approval_required');
  assert.notEqual(third.approval.id, first.approval.id, 'a new approval request');

  step('refuse with a reason typed in the page');
  const again = page.locator(`#pending > li[data-id="${third.approval.id}"]`);
  await again.waitFor(WAIT);
  await again.getByLabel('Reason for refusing').focus();
  await page.keyboard.type('not to outside addresses');
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => document.querySelectorAll('#pending > li').length === 0,
    null, WAIT);
  await page.locator('#done').filter({ hasText: 'Refused' }).waitFor(WAIT);
  const refusal = decisions.at(-1);
  assert.equal(refusal.path, `/v1/approvals/${encodeURIComponent(third.approval.id)}/refuse`);
  assert.deepEqual(refusal.body, { by: APPROVER, reason: 'not to outside addresses' });
  const denied = await expectOutcome(CALL, 'denied');
  assert.equal(denied.denial?.policy_id, POLICY, JSON.stringify(denied));

  step('the feed shows the decisions and the last hour\'s counts');
  await page.locator('#feed > li[data-decision="approval_granted"]').first().waitFor(WAIT);
  const row = page.locator(`#counts-body > tr[data-policy="${POLICY}"]`);
  await row.waitFor(WAIT);
  assert.ok((await row.innerText()).includes(POLICY));
  assert.ok(await page.locator('#feed > li').count() <= 50);

  step('deciding twice shows the service\'s error');
  // Another action (the refused one stays refused), decided behind the page's back, then
  // approved in the page.
  const other = { ...CALL, arguments: { to: 'dave@example.com', body: 'Minutes attached.' } };
  const fourth = await expectOutcome(other, 'approval_required');
  const stale = page.locator(`#pending > li[data-id="${fourth.approval.id}"]`);
  await stale.waitFor(WAIT);
  // Stop the page's polling from seeing the change before the click.
  await page.route('**/v1/approvals?status=pending', (route) => route.abort());
  const behind = await fetch(`${base}/v1/approvals/${encodeURIComponent(fourth.approval.id)}/refuse`, {
    method: 'POST',
    headers: { Authorization: 'Bearer ' + token, 'Content-Type': 'application/json' },
    body: JSON.stringify({ by: 'someone else', reason: 'decided elsewhere' }),
  });
  assert.ok(behind.ok, `refused behind the page's back: ${behind.status} ${await behind.text()}`);
  await stale.getByRole('button', { name: 'Approve' }).focus();
  await page.keyboard.press('Enter');
  await page.locator('#alert').filter({ hasText: /./ }).waitFor(WAIT);
  assert.equal(await page.locator('#alert').getAttribute('role'), 'alert');
  await page.unroute('**/v1/approvals?status=pending');
  await page.waitForFunction(() => document.querySelectorAll('#pending > li').length === 0,
    null, WAIT);

  step('at phone width nothing scrolls sideways');
  const long = {
    ...CALL,
    arguments: { to: 'bob@example.com', body: 'x'.repeat(400), url: 'https://example.com/' + 'a/'.repeat(120) },
  };
  const fifth = await expectOutcome(long, 'approval_required');
  await page.setViewportSize({ width: 360, height: 740 });
  await page.locator(`#pending > li[data-id="${fifth.approval.id}"]`).waitFor(WAIT);
  const width = await page.evaluate(() => document.documentElement.scrollWidth);
  assert.ok(width <= 360, `the page is ${width} px wide at 360 px`);
  if (process.env.PORTCULLIS_CONSOLE_SCREENSHOT) {
    await page.screenshot({ path: process.env.PORTCULLIS_CONSOLE_SCREENSHOT, fullPage: true });
  }

  step('sign out');
  await page.getByRole('button', { name: 'Sign out' }).focus();
  await page.keyboard.press('Enter');
  await page.getByLabel('Service token').waitFor(WAIT);
  assert.equal(await page.evaluate((t) => Object.values(sessionStorage).includes(t), token), false,
    'the token is no longer kept');
  assert.equal(await page.locator('#pending > li').count(), 0);

  step('no request left for another host, and the policy blocked nothing');
  assert.ok(requests.length > 0);
  const elsewhere = requests.filter((url) => new URL(url).origin !== origin);
  assert.deepEqual(elsewhere, [], 'every request the page made went to the service');
  assert.deepEqual(problems, []);
  await context.close();
}

main().then(
  () => {
    console.log('console test: all checks passed');
  },
  (error) => {
    console.error(error);
    process.exit(1);
  },
);
