// The panel's Enrollment page, driven in a real Chromium against a running server: an admin
// sets the organization's enrollment policy, issues an enrollment token that is shown once
// (with a copyable command), sees its uses counted when a runner enrolls with it, and revokes
// it. Environment as tests/panel/panel.test.mjs (BASE_URL, EDGERUNNER_STATE_DIR,
// EDGERUNNER_BIN, CHROMIUM_BIN, PANEL_ARTIFACTS). Every wait is bounded.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  ARTIFACTS, BASE_URL, EDGERUNNER_BIN, STATE_DIR, launchChromium, newOrg, run, waitFor,
} from './support.mjs';

const PANEL = `${BASE_URL}/remote-runners`;
const sel = (testid) => `[data-testid="${testid}"]`;
let browser;

before(async () => {
  assert.ok(BASE_URL, 'BASE_URL must name the running server');
  assert.ok(STATE_DIR, 'EDGERUNNER_STATE_DIR must name the server state directory');
  assert.ok(EDGERUNNER_BIN, 'EDGERUNNER_BIN must name the edgerunner CLI');
  mkdirSync(ARTIFACTS, { recursive: true });
  browser = await launchChromium();
});

after(async () => {
  if (browser) await browser.close();
});

async function call(key, method, path, body) {
  const response = await fetch(`${BASE_URL}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${key}`,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(60000),
  });
  return { status: response.status, body: await response.json().catch(() => null) };
}

/** A page that records CSP violations, page errors and alert dialogs; the test asserts none. */
async function openPage() {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const problems = [];
  await context.exposeBinding('__enrollmentViolation', (_source, v) => problems.push({ csp: v }));
  await context.addInitScript(() => {
    document.addEventListener('securitypolicyviolation', (event) => {
      window.__enrollmentViolation(`${event.violatedDirective} ${event.blockedURI}`);
    }, true);
  });
  const page = await context.newPage();
  page.setDefaultTimeout(20000);
  page.on('pageerror', (error) => problems.push({ pageerror: error.message }));
  page.on('dialog', (dialog) => {
    problems.push({ dialog: dialog.message() });
    dialog.dismiss().catch(() => {});
  });
  return { context, page, problems };
}

async function signIn(page, key) {
  await page.goto(PANEL);
  await page.fill(sel('signin-key'), key);
  await page.click(sel('signin-submit'));
  await page.waitForSelector(sel('topbar'));
}

async function text(page, selector) {
  return (await page.textContent(selector)).trim();
}

/** `edgerunner runner enroll` of a fresh key with the token in its environment. */
async function enrollWithCli(org, token) {
  const scratch = mkdtempSync(join(tmpdir(), 'panel-enrollment-'));
  try {
    const { stdout } = await run(EDGERUNNER_BIN, [
      'runner', 'enroll', '--server', BASE_URL, '--organization', org.organizationId,
      '--config', join(scratch, 'runner.json'), '--execution-kind', 'prompt', '--runtime', 'python3.12', '--json',
    ], { env: { PATH: process.env.PATH || '/usr/bin:/bin', HOME: scratch, EDGERUNNER_ENROLLMENT_TOKEN: token } });
    return JSON.parse(stdout);
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

test('an admin sets the enrollment policy and issues, watches and revokes a token shown once', { timeout: 240000 }, async () => {
  const org = await newOrg('enrollment');
  const { context, page, problems } = await openPage();
  try {
    await signIn(page, org.adminKey);
    await page.click(sel('enrollment-link'));
    await page.waitForSelector(sel('enrollment-view'));
    assert.match(page.url(), /\/remote-runners\/enrollment$/);
    await waitFor('the stored policy', async () => (await text(page, sel('policy-current'))) === 'open');
    assert.equal(await page.isChecked(sel('policy-open')), true);
    assert.equal(await page.isDisabled(sel('policy-save')), true, 'nothing to save yet');

    // Token policy: saved, shown, and in force on the server.
    await page.check(sel('policy-token'));
    await page.click(sel('policy-save'));
    await page.waitForSelector(sel('policy-saved'));
    assert.equal(await text(page, sel('policy-current')), 'token');
    const policy = await call(org.adminKey, 'GET', '/api/developer/enrollment-policy');
    assert.equal(policy.body.policy, 'token');

    // No tokens yet; issue one for two machines.
    await page.waitForSelector(sel('tokens-empty'));
    await page.click(sel('issue-token'));
    await page.waitForSelector(sel('issue-dialog'));
    await page.fill(sel('issue-name'), 'rack 4');
    await page.fill(sel('issue-uses'), '2');
    await page.selectOption(sel('issue-lifetime'), '604800');
    await page.click(sel('issue-submit'));
    await page.waitForSelector(sel('enrollment-token-dialog'));
    const token = await text(page, sel('enrollment-token'));
    assert.match(token, /^ere_[0-9a-f]{64}$/);
    const cli = await text(page, sel('enrollment-token-cli'));
    assert.ok(cli.includes(`EDGERUNNER_ENROLLMENT_TOKEN=${token}`), cli);
    assert.ok(cli.includes(`--organization ${org.organizationId}`), cli);
    assert.ok(await page.$(sel('enrollment-token-copy')), 'the token has a Copy button');
    await page.locator(sel('enrollment-token-dialog')).screenshot({ path: join(ARTIFACTS, 'enrollment-token.png') });

    // Closed, it is gone from the page and from storage; the list shows its prefix only.
    await page.click(sel('token-done'));
    await page.waitForSelector(sel('enrollment-token-dialog'), { state: 'detached' });
    const row = `${sel('token-row')}`;
    await page.waitForSelector(row);
    const html = await page.evaluate(() => document.documentElement.outerHTML);
    assert.ok(!html.includes(token.slice(12)), 'the token is not in the page once closed');
    const storage = await page.evaluate(() => JSON.stringify({ s: { ...sessionStorage }, l: { ...localStorage } }));
    assert.ok(!storage.includes(token.slice(12)), 'the token is not in any storage');
    assert.equal(await text(page, sel('token-prefix')), token.slice(0, 12));
    assert.equal(await text(page, sel('token-uses')), '0 / 2');
    assert.equal(await text(page, sel('token-state')), 'live');

    // A runner enrolls with it; its use is counted.
    const enrolled = await enrollWithCli(org, token);
    assert.equal(enrolled.runner.state, 'pending_approval');
    await page.reload();
    await page.waitForSelector(row);
    await waitFor('the use to show', async () => (await text(page, sel('token-uses'))) === '1 / 2');
    await page.screenshot({ path: join(ARTIFACTS, 'enrollment.png'), fullPage: true });

    // Revoked from the panel (the API offers it: `actions`): the server refuses it, and offers
    // nothing more, so neither does the page.
    const offered = await call(org.adminKey, 'GET', '/api/developer/enrollment-tokens');
    assert.deepEqual(offered.body.enrollmentTokens[0].actions, ['revoke']);
    await page.click(sel('token-revoke'));
    await waitFor('the revocation to show', async () => (await text(page, sel('token-state'))) === 'revoked');
    const listed = await call(org.adminKey, 'GET', '/api/developer/enrollment-tokens');
    assert.equal(listed.body.enrollmentTokens[0].state, 'revoked');
    assert.deepEqual(listed.body.enrollmentTokens[0].actions, []);
    assert.equal(await page.$(sel('token-revoke')), null, 'no revoke button once revoked');
    await assert.rejects(enrollWithCli(org, token), /ENROLLMENT_TOKEN_INVALID/);

    // Back to open.
    await page.check(sel('policy-open'));
    await page.click(sel('policy-save'));
    await waitFor('the open policy', async () => (await text(page, sel('policy-current'))) === 'open');
    assert.deepEqual(problems, [], 'no CSP violation, page error or alert');
  } catch (error) {
    await page.screenshot({ path: join(ARTIFACTS, 'failure-enrollment.png'), fullPage: true }).catch(() => {});
    throw error;
  } finally {
    await context.close();
  }
});

test('a member key sees no enrollment controls', { timeout: 120000 }, async () => {
  const org = await newOrg('enrollment-member');
  const created = await call(org.adminKey, 'POST', '/api/developer/api-keys',
    { name: 'reader', scopes: ['runs:read'], role: 'member' });
  assert.equal(created.status, 201);
  const { context, page, problems } = await openPage();
  try {
    await signIn(page, created.body.apiKey);
    await page.waitForSelector(sel('runners-view'));
    assert.equal(await page.$(sel('enrollment-link')), null);
    await page.goto(`${PANEL}/enrollment`);
    await page.waitForSelector(sel('enrollment-view'));
    assert.equal(await page.$(sel('policy-form')), null);
    assert.equal(await page.$(sel('issue-token')), null);
    assert.deepEqual(problems, []);
  } finally {
    await context.close();
  }
});
