// What the panel's browser suites share: the API as a test calls it, a real runner process,
// and a Chromium page that records every CSP violation, dialog and page error. Each suite
// calls `startBrowser` before its tests and `stopBrowser` after them.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  ARTIFACTS, BASE_URL, EDGERUNNER_BIN, STATE_DIR, launchChromium, unique, waitFor,
} from './support.mjs';

export const PANEL = `${BASE_URL}/remote-runners`;

// Every CSP violation any page reports during the suite.
const allViolations = [];
let browser;

export async function startBrowser() {
  assert.ok(BASE_URL, 'BASE_URL must name the running server');
  assert.ok(STATE_DIR, 'EDGERUNNER_STATE_DIR must name the server state directory');
  assert.ok(EDGERUNNER_BIN, 'EDGERUNNER_BIN must name the edgerunner CLI');
  mkdirSync(ARTIFACTS, { recursive: true });
  browser = await launchChromium();
}

export async function stopBrowser() {
  if (browser) await browser.close();
  assert.deepEqual(allViolations, [], 'no Content-Security-Policy violation anywhere in the suite');
}

// ---------------------------------------------------------------------------------------------
// Waiting
// ---------------------------------------------------------------------------------------------

export async function call(key, method, path, body) {
  const response = await fetch(`${BASE_URL}${path}`, {
    method,
    headers: {
      ...(key ? { authorization: `Bearer ${key}` } : {}),
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(60000),
  });
  const text = await response.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {
    // not JSON
  }
  return { status: response.status, body: json, text };
}

export async function ok(key, method, path, body) {
  const answer = await call(key, method, path, body);
  assert.ok(answer.status >= 200 && answer.status < 300,
    `${method} ${path} answered ${answer.status}: ${answer.text}`);
  return answer.body;
}

export async function newKey(org, name, scopes, role) {
  const created = await ok(org.adminKey, 'POST', '/api/developer/api-keys', { name, scopes, role });
  assert.match(created.apiKey, /^erk_/);
  return created.apiKey;
}

export async function registerRunner(org, name, { runnerKey = unique('rk'), maxConcurrentJobs = 1 } = {}) {
  const answer = await ok(org.adminKey, 'POST', '/api/remote-runners', {
    name,
    runnerKey,
    maxConcurrentJobs,
    capabilities: { executionKinds: ['prompt'], runtimes: ['python3.12'] },
  });
  assert.match(answer.bootstrapToken, /^erb_/);
  return { runner: answer.runner, token: answer.bootstrapToken };
}

/** A prompt artifact with one version promoted to staging. */
export async function release(org) {
  const artifact = await ok(org.adminKey, 'POST', '/api/releases/artifacts', { kind: 'prompt', name: unique('prompt') });
  const version = await ok(org.adminKey, 'POST', `/api/releases/artifacts/${artifact.id}/versions`, {
    content: { template: 'Answer {{question}} briefly.', temperature: 0 },
  });
  await ok(org.adminKey, 'POST', `/api/releases/versions/${version.id}/promote`, { environment: 'staging' });
  return { artifactId: artifact.id, artifactName: artifact.name, versionId: version.id };
}

export async function enqueue(org, rel, input) {
  return ok(org.adminKey, 'POST', '/api/remote-runners/jobs', {
    idempotencyKey: unique('idem'),
    subject: { kind: 'prompt', artifactId: rel.artifactId, versionId: rel.versionId, environment: 'staging' },
    input,
    requirements: {
      executionKind: 'prompt',
      runtime: 'python3.12',
      limits: { cpuSeconds: 60, memoryMb: 512, wallSeconds: 60, outputBytes: 1048576 },
    },
  });
}

/**
 * `edgerunner runner start --exec COMMAND --exit-when-idle` with a bootstrap token, in a clean
 * environment and a scratch HOME; resolves with its exit once it is idle (bounded).
 */
export async function runRunner({ runnerId, token, exec, timeout = 120000 }) {
  const scratch = mkdtempSync(join(tmpdir(), 'panel-runner-'));
  const child = spawn(EDGERUNNER_BIN, [
    'runner', 'start', '--log-format', 'json', '--poll-interval', '0.2',
    '--work-dir', join(scratch, 'work'), '--exec', exec, '--exit-when-idle',
  ], {
    env: {
      PATH: process.env.PATH || '/usr/bin:/bin',
      HOME: scratch,
      XDG_CONFIG_HOME: join(scratch, 'xdg'),
      EVALGATE_BASE_URL: BASE_URL,
      EVALGATE_RUNNER_ID: runnerId,
      EVALGATE_RUNNER_BOOTSTRAP_TOKEN: token,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let log = '';
  child.stdout.on('data', (d) => { log += d; });
  child.stderr.on('data', (d) => { log += d; });
  try {
    const exit = await new Promise((resolveExit, reject) => {
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        reject(new Error(`the runner did not exit within ${timeout} ms; its log:\n${log}`));
      }, timeout);
      child.on('error', (error) => {
        clearTimeout(timer);
        reject(error);
      });
      child.on('exit', (code, signal) => {
        clearTimeout(timer);
        resolveExit({ code, signal });
      });
    });
    assert.equal(exit.code, 0, `the runner exited ${exit.code} (${exit.signal}); its log:\n${log}`);
    return log;
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

export async function jobDetail(org, jobId) {
  return ok(org.adminKey, 'GET', `/api/remote-runners/jobs/${jobId}`);
}

/** Waits until the API says the job is finished (`terminal`), and returns its detail. */
export async function waitForFinished(org, jobId, timeout = 60000) {
  return waitFor(`job ${jobId} to finish`, async () => {
    const job = await jobDetail(org, jobId);
    return job.terminal ? job : false;
  }, { timeout, interval: 300 });
}

// ---------------------------------------------------------------------------------------------
// The browser
// ---------------------------------------------------------------------------------------------

/** A fresh browser context and page that records dialogs, page errors and CSP violations. */
export async function openPanel({ width = 1440, height = 900 } = {}) {
  const context = await browser.newContext({ viewport: { width, height }, acceptDownloads: true });
  const violations = [];
  const dialogs = [];
  const errors = [];
  await context.exposeBinding('__panelTestViolation', (_source, violation) => {
    violations.push(violation);
    allViolations.push(violation);
  });
  await context.addInitScript(() => {
    document.addEventListener('securitypolicyviolation', (event) => {
      window.__panelTestViolation({
        directive: event.violatedDirective,
        blocked: event.blockedURI,
        sample: event.sample,
        source: event.sourceFile,
        line: event.lineNumber,
      });
    }, true);
  });
  const page = await context.newPage();
  page.setDefaultTimeout(20000);
  page.on('dialog', (dialog) => {
    dialogs.push(`${dialog.type()}: ${dialog.message()}`);
    dialog.dismiss().catch(() => {});
  });
  page.on('pageerror', (error) => errors.push(error.message));
  page.on('console', (message) => {
    if (message.type() === 'error' && /Content Security Policy/i.test(message.text())) {
      const violation = { console: message.text() };
      violations.push(violation);
      allViolations.push(violation);
    }
  });
  return { context, page, violations, dialogs, errors };
}

/** Runs `body(panel)` in a fresh page; a failure leaves a screenshot; always checks the page stayed clean. */
export async function withPanel(name, options, body) {
  const panel = await openPanel(options);
  try {
    await body(panel);
    assert.deepEqual(panel.violations, [], 'no CSP violation');
    assert.deepEqual(panel.dialogs, [], 'no alert/confirm/prompt dialog');
    assert.deepEqual(panel.errors, [], 'no uncaught page error');
  } catch (error) {
    await panel.page.screenshot({ path: join(ARTIFACTS, `failure-${name}.png`), fullPage: true }).catch(() => {});
    throw error;
  } finally {
    await panel.context.close();
  }
}

export const sel = (testid) => `[data-testid="${testid}"]`;

export async function signIn(page, key) {
  await page.goto(PANEL);
  await page.waitForSelector(sel('signin-key'));
  await page.fill(sel('signin-key'), key);
  await page.click(sel('signin-submit'));
  await page.waitForSelector(sel('topbar'));
}

export async function texts(page, selector) {
  return page.$$eval(selector, (els) => els.map((el) => el.textContent.trim()));
}

export async function text(page, selector) {
  return (await page.textContent(selector)).trim();
}
