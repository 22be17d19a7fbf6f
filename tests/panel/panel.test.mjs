// The admin panel at /remote-runners, driven in a real Chromium against a running server.
//
// Environment (set by scripts/test): BASE_URL (the running server), EDGERUNNER_STATE_DIR (its
// local state, for scripts/bootstrap-admin), EDGERUNNER_BIN (the edgerunner CLI), CHROMIUM_BIN
// (default /usr/bin/chromium), PANEL_ARTIFACTS (screenshots; default target/panel). Run from
// the repository root: `node --test tests/panel/`.
//
// Every test makes its own organization, so they can run in any order. Every wait is bounded:
// `waitFor` polls a condition until a deadline; there are no sleeps used as synchronization.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ARTIFACTS, BASE_URL, EDGERUNNER_BIN, newOrg, run, unique, waitFor } from './support.mjs';
import {
  PANEL, call, enqueue, jobDetail, newKey, ok, registerRunner, release, runRunner, sel, signIn,
  startBrowser, stopBrowser, text, texts, waitForFinished, withPanel,
} from './browser.mjs';

const WRONG_KEY = `erk_${'0'.repeat(64)}`;

before(startBrowser);
after(stopBrowser);

async function storageDump(page) {
  return page.evaluate(() => {
    const dump = (s) => Object.fromEntries(Array.from({ length: s.length }, (_, i) => [s.key(i), s.getItem(s.key(i))]));
    return { session: dump(sessionStorage), local: dump(localStorage), cookie: document.cookie };
  });
}

async function pageHasNoToken(page) {
  const { html, visible } = await page.evaluate(() => ({
    html: document.documentElement.outerHTML,
    visible: document.body.innerText,
  }));
  assert.ok(!visible.includes('erb_'), 'no bootstrap token in the page text');
  assert.ok(!html.includes('erb_'), 'no bootstrap token anywhere in the DOM');
  const storage = await storageDump(page);
  assert.ok(!JSON.stringify(storage).includes('erb_'), `no bootstrap token in storage: ${JSON.stringify(storage)}`);
}

/** Opens a dialog by its button, types a reason, confirms, and waits for the dialog to close. */
async function actWithReason(page, action, dialog, reason, prepare) {
  await page.click(sel(`action-${action}`));
  const box = await page.waitForSelector(sel(dialog));
  const confirm = await box.$(sel('confirm'));
  assert.equal(await confirm.isDisabled(), true, `${action}: confirm is disabled before a reason is given`);
  await (await box.$(sel('reason'))).fill(reason);
  if (prepare) await prepare(box, confirm);
  assert.equal(await confirm.isDisabled(), false, `${action}: confirm is enabled with a reason`);
  await confirm.click();
  await page.waitForSelector(sel(dialog), { state: 'detached' });
}

async function runnerRowState(page, runnerId) {
  const row = await page.$(`${sel('runner-row')}[data-runner-id="${runnerId}"]`);
  if (!row) return null;
  return {
    state: (await (await row.$(sel('runner-state'))).textContent()).trim(),
    connection: await (await row.$(sel('runner-connection'))).getAttribute('data-status'),
    lastSeen: (await (await row.$(sel('runner-last-seen'))).textContent()).trim(),
    heartbeat: (await (await row.$(sel('runner-heartbeat'))).textContent()).trim(),
    name: (await (await row.$(sel('runner-name'))).textContent()),
  };
}

const WRITE_CONTROLS = ['register-runner', 'action-approve', 'action-drain', 'action-activate',
  'action-revoke', 'action-rotate', 'action-cancel', 'action-hold', 'action-release'];

async function presentControls(page) {
  const found = [];
  for (const id of WRITE_CONTROLS) {
    if (await page.$(sel(id))) found.push(id);
  }
  return found;
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

test('signs in with an admin key; a wrong key gets a clear message with its error code', { timeout: 180000 }, async () => {
  const org = await newOrg('signin');
  const refused = await call(WRONG_KEY, 'GET', '/api/developer/api-keys/self');
  assert.equal(refused.status, 401, refused.text);
  const code = refused.body.error.code;

  await withPanel('signin', {}, async ({ page, context }) => {
    const response = await page.goto(PANEL);
    assert.equal(response.status(), 200);
    await page.waitForSelector(sel('signin-form'));

    await page.fill(sel('signin-key'), WRONG_KEY);
    await page.click(sel('signin-submit'));
    await page.waitForSelector(sel('error-code'));
    assert.equal(await text(page, sel('error-code')), code);
    assert.match(await text(page, sel('error-message')), /^That key was not accepted: \S/);
    assert.deepEqual((await storageDump(page)).session, {}, 'a refused key is not stored');

    // Keyboard only: the key field is focused; type and press Enter.
    await page.fill(sel('signin-key'), '');
    await page.focus(sel('signin-key'));
    await page.keyboard.type(org.adminKey);
    await page.keyboard.press('Enter');
    await page.waitForSelector(sel('topbar'));
    assert.equal(await text(page, sel('identity-org')), org.name);
    assert.equal(await text(page, sel('identity-role')), 'admin');
    const scopes = (await text(page, sel('identity-scopes'))).split(/\s+/);
    for (const scope of ['runs:read', 'runs:write', 'admin:org']) assert.ok(scopes.includes(scope), scope);
    await page.waitForSelector(sel('empty-state'));
    assert.match(await text(page, sel('empty-state')), /No runners yet\. Choose Register runner, or enroll one with edgerunner runner enroll/);

    const storage = await storageDump(page);
    assert.deepEqual(Object.values(storage.session), [org.adminKey], 'the key is in sessionStorage');
    assert.deepEqual(storage.local, {}, 'nothing in localStorage');
    assert.equal(storage.cookie, '');
    assert.deepEqual(await context.cookies(), []);
    assert.ok(!page.url().includes(org.adminKey), 'the key is not in the URL');

    // A reload keeps the tab signed in; Sign out forgets the key.
    await page.reload();
    await page.waitForSelector(sel('topbar'));
    await page.click(sel('signout'));
    await page.waitForSelector(sel('signin-form'));
    assert.deepEqual((await storageDump(page)).session, {}, 'signing out removes the key');
    await page.reload();
    await page.waitForSelector(sel('signin-form'));
  });
});

test('registers a runner in the dialog; the token is shown once; a CLI runner uses it and shows as live', { timeout: 240000 }, async () => {
  const org = await newOrg('register');
  const runnerKey = unique('panel-gpu');

  await withPanel('register', {}, async ({ page }) => {
    await signIn(page, org.adminKey);
    await page.click(sel('register-runner'));
    await page.waitForSelector(sel('register-dialog'));
    await page.fill(sel('register-name'), 'Panel GPU 1');
    await page.fill(sel('register-key'), runnerKey);
    await page.fill(sel('register-runtimes'), 'python3.12, nodejs20');
    await page.check(sel('register-kind-prompt'));
    assert.equal(await page.inputValue(sel('register-max')), '1');
    const boundary = await text(page, sel('register-boundary'));
    for (const part of ['deny_all', '3600', '65536', '86400', '104857600']) assert.ok(boundary.includes(part), part);

    // A narrower limit above the default ceiling is refused in the page.
    await page.fill(sel('register-limit-cpuSeconds'), '999999');
    await page.getByRole('button', { name: 'Register identity', exact: true }).click();
    await page.waitForSelector(`${sel('register-dialog')} ${sel('error')}`);
    await page.fill(sel('register-limit-cpuSeconds'), '1800');
    await page.getByRole('button', { name: 'Register identity', exact: true }).click();

    await page.waitForSelector(sel('token-dialog'));
    const token = await text(page, sel('bootstrap-token'));
    assert.match(token, /^erb_\S+$/);
    const runnerId = await text(page, sel('token-runner-id'));
    assert.match(runnerId, /^run_/);
    const env = await text(page, sel('token-env'));
    const origin = new URL(BASE_URL).origin;
    assert.ok(env.includes(`EVALGATE_BASE_URL=${origin}`), env);
    assert.ok(env.includes(`EVALGATE_RUNNER_ID=${runnerId}`), env);
    assert.ok(env.includes(`EVALGATE_RUNNER_BOOTSTRAP_TOKEN=${token}`), env);
    assert.equal(await text(page, sel('token-cli')), "edgerunner runner start --exec './evaluate.sh'");
    assert.ok((await text(page, sel('token-sdk'))).includes(
      'RemoteRunnerWorker(base_url=os.environ["EVALGATE_BASE_URL"], runner_id=os.environ["EVALGATE_RUNNER_ID"], bootstrap_token=os.environ["EVALGATE_RUNNER_BOOTSTRAP_TOKEN"])'));
    assert.match(await text(page, sel('token-warning')),
      /This token is shown once\. Store it in your secret manager now; it cannot be recovered\./);
    assert.ok(!JSON.stringify(await storageDump(page)).includes('erb_'), 'the token is never stored');

    // The registration took the narrower limit.
    const registered = await ok(org.adminKey, 'GET', `/api/remote-runners/${runnerId}`);
    assert.equal(registered.runnerKey, runnerKey);
    assert.equal(registered.capabilities.limits.cpuSeconds, 1800);
    assert.deepEqual([...registered.capabilities.runtimes].sort(), ['nodejs20', 'python3.12']);

    // Closed, and then after a reload, it is gone for good.
    await page.click(sel('token-done'));
    await page.waitForSelector(sel('token-dialog'), { state: 'detached' });
    await pageHasNoToken(page);
    await page.reload();
    await page.waitForSelector(`${sel('runner-row')}[data-runner-id="${runnerId}"]`);
    await pageHasNoToken(page);
    // Active as the admin left it, and never connected: the two side by side.
    const before = await runnerRowState(page, runnerId);
    assert.deepEqual([before.state, before.connection], ['active', 'never_connected']);

    // A real runner process uses the token the dialog showed.
    await runRunner({ runnerId, token, exec: 'true' });
    const live = await waitFor('the runner row to show it active, online and just seen', async () => {
      const row = await runnerRowState(page, runnerId);
      return row && row.state === 'active' && row.connection === 'online'
        && /^(just now|\d+ s ago)$/.test(row.lastSeen) ? row : false;
    }, { timeout: 30000 });
    assert.equal(live.name, 'Panel GPU 1');
    const seen = await ok(org.adminKey, 'GET', `/api/remote-runners/${runnerId}`);
    assert.ok(seen.lastSeenAt, 'the server recorded the runner as seen');

    // Its page says what it enforces on its host, exactly as the runner reported it.
    const reported = await ok(org.adminKey, 'GET', `/api/remote-runners/${runnerId}/files/isolation.json`);
    await page.click(`${sel('runner-row')}[data-runner-id="${runnerId}"] ${sel('runner-name')}`);
    await page.waitForSelector(sel('runner-isolation'));
    const held = await page.$$eval(`${sel('runner-isolation')} [data-held]`, (els) => els.map((el) => el.dataset.held));
    assert.deepEqual(held, [reported.session, reported.processSweep, reported.networkDenyAll].map(String));
    const shown = await text(page, sel('runner-isolation'));
    for (const limit of reported.rlimits) assert.ok(shown.includes(limit), shown);
    assert.ok(shown.includes(reported.networkDenyAll ? 'enforced' : 'not on this host'), shown);
    assert.match(await text(page, sel('runner-isolation-containment')),
      reported.processContainment === 'cgroup' ? /^a cgroup per job/ : /^a subreaper per job/);
    assert.match(await text(page, sel('runner-isolation-memory')),
      reported.memoryLimit === 'cgroup' ? /its cgroup/ : /RLIMIT_AS/);
    await page.locator(sel('runner-isolation-card')).screenshot({ path: join(ARTIFACTS, 'runner-isolation.png') });
    // And when its bootstrap token expires, as the API says (90 days by default).
    const expires = await page.getAttribute(sel('runner-token-expires'), 'datetime');
    assert.equal(expires, seen.bootstrapTokenExpiresAt);
    assert.match(await text(page, sel('runner-token-expires')), /^in (89|90) d$/);
    // The operator's first key (scripts/bootstrap-admin) has no end, and the bar says none.
    assert.equal(await page.$(sel('identity-expires')), null);
  });
});

test('a job followed live to its end shows its claim, transitions, verified chain, stdout and stderr, completion and evidence', { timeout: 300000 }, async () => {
  const org = await newOrg('job');
  const { runner, token } = await registerRunner(org, 'panel-job-runner');
  const rel = await release(org);
  const job = await enqueue(org, rel, { question: 'what is 6 × 7?', weight: 1.5 });

  await withPanel('job', {}, async ({ page }) => {
    await signIn(page, org.adminKey);
    await page.click(sel('tab-jobs'));
    await page.waitForSelector(`${sel('job-row')}[data-job-id="${job.id}"]`);
    // Listed by what it runs: the artifact's name and version, the id still the link.
    const listed = `${sel('job-row')}[data-job-id="${job.id}"]`;
    assert.equal(await text(page, `${listed} ${sel('job-artifact-name')}`), rel.artifactName);
    assert.equal(await text(page, `${listed} ${sel('job-version')}`), `v${rel.versionId}`);
    assert.equal(await page.getAttribute(`${listed} ${sel('job-link')}`, 'href'), `/remote-runners/jobs/${job.id}`);
    // The state filter offers the states the API names, in its order.
    const listedStates = (await ok(org.adminKey, 'GET', '/api/remote-runners/jobs')).states;
    assert.equal(listedStates.length, 8);
    await waitFor('the filter to offer the API\'s states', async () => JSON.stringify(await page.$$eval(
      `${sel('job-state-filter')} option`, (os) => os.map((o) => o.value).filter(Boolean))) === JSON.stringify(listedStates));
    assert.equal(await text(page, `${sel('count-queued')} .count-n`), '1');
    assert.equal(await text(page, `${sel('count-succeeded')} strong`), '0');
    await page.click(`${sel('job-row')}[data-job-id="${job.id}"] ${sel('job-link')}`);
    await page.waitForURL(`${PANEL}/jobs/${job.id}`);
    await waitFor('the job page to show queued', async () => (await text(page, sel('job-detail-state'))) === 'queued');
    await page.waitForSelector(sel('job-no-claims'));

    // The page follows the job while a real runner takes it: no reload from here on.
    await runRunner({ runnerId: runner.id, token, exec: 'echo alpha; echo beta >&2; echo gamma' });
    const done = await waitForFinished(org, job.id);
    assert.equal(done.state, 'succeeded', JSON.stringify(done));
    const accepted = done.completions.find((c) => c.decision === 'accepted');
    assert.ok(accepted, 'an accepted completion');
    const runId = accepted.evidence?.evaluationRunId;
    assert.ok(runId, 'the completion names its evaluation run');
    await waitFor('the page to follow the job to succeeded', async () => (await text(page, sel('job-detail-state'))) === 'succeeded', { timeout: 30000 });
    await waitFor('the log to be read to its end', async () => (await text(page, sel('log-status'))) === 'complete', { timeout: 30000 });
    await waitFor('the completion to show', async () => page.$(`${sel('completion')}[data-decision="accepted"]`));

    // Subject and the claim: the artifact by its name, the id beside it.
    assert.equal(await text(page, sel('subject-artifact-name')), rel.artifactName);
    assert.equal(done.subject.artifactName, rel.artifactName);
    assert.equal(await text(page, sel('subject-artifact')), rel.artifactId);
    assert.equal(await text(page, sel('subject-version')), String(rel.versionId));
    assert.equal(await page.getAttribute(sel('subject-content-hash'), 'title'), done.subject.contentHash);
    assert.equal(await page.getAttribute(sel('job-input-hash'), 'title'), done.inputHash);
    assert.equal((await page.$$(sel('job-claim'))).length, done.claims.length);
    assert.equal(done.claims.length, 1);
    assert.equal(await text(page, sel('claim-runner')), runner.id);

    // Every transition, in order, to the terminal one.
    const types = await texts(page, sel('event-type'));
    assert.deepEqual(types, done.events.map((e) => e.type));
    for (const expected of ['job.enqueued', 'job.claimed', 'job.started', 'job.completed']) {
      assert.ok(types.includes(expected), `${expected} in ${types}`);
    }
    assert.equal(types[0], 'job.enqueued');
    assert.equal(types[types.length - 1], 'job.completed');

    // Stream custody: every link recomputed in the page holds.
    assert.ok(done.stream.length >= 3, 'started, log and exited chunks');
    await waitFor('every chunk row', async () => (await page.$$(sel('custody-chunk'))).length === done.stream.length);
    assert.equal((await page.$$(sel('link-ok'))).length, done.stream.length, 'every link holds');
    assert.equal((await page.$$(sel('link-broken'))).length, 0);
    for (const cell of await texts(page, sel('link-ok'))) assert.equal(cell, '✓ holds');

    // The log, stderr told apart.
    const lines = await waitFor('the log lines', async () => {
      const found = await page.$$eval(sel('log-line'), (els) => els.map((el) => ({
        stream: el.dataset.stream,
        text: el.querySelector('.log-text').textContent,
        marker: el.querySelector('.log-mark').textContent,
        stderrClass: el.classList.contains('log-stderr'),
      })));
      return found.some((l) => l.text === 'gamma') ? found : false;
    });
    const stdout = lines.filter((l) => l.stream === 'stdout').map((l) => l.text);
    const stderr = lines.filter((l) => l.stream === 'stderr');
    assert.deepEqual(stdout, ['alpha', 'gamma']);
    assert.deepEqual(stderr.map((l) => l.text), ['beta']);
    assert.equal(stderr[0].marker, 'stderr');
    assert.equal(stderr[0].stderrClass, true);
    assert.ok(lines.filter((l) => l.stream === 'stdout').every((l) => !l.stderrClass));
    const events = await texts(page, `${sel('log-event')} .log-text`);
    assert.ok(events.some((e) => e.startsWith('started')), `a started line in ${events}`);
    assert.ok(events.some((e) => e.startsWith('exited') && e.includes('exitCode=0')), `an exited line in ${events}`);

    // The accepted completion, then its evidence run with custody.
    const completion = await page.$(`${sel('completion')}[data-decision="accepted"]`);
    assert.ok(completion, 'the accepted completion is shown');
    assert.equal(await completion.getAttribute('data-completion-id'), accepted.id);
    assert.equal(await page.getAttribute(sel('completion-result-hash'), 'title'), accepted.resultHash);
    await page.click(sel('evidence-button'));
    await page.waitForSelector(sel('evidence-run'));
    assert.equal(await text(page, sel('evidence-run-id')), runId);
    const results = await page.$$(sel('evidence-test-result'));
    assert.ok(results.length >= 1, 'the runner recorded a test result');
    const custody = await texts(page, `${sel('evidence-test-result')} ${sel('custody')}`);
    for (const line of custody) assert.equal(line, `custody: completion ${accepted.id} (job ${job.id})`);

    // The custody bundle downloads under its name.
    const [download] = await Promise.all([
      page.waitForEvent('download', { timeout: 20000 }),
      page.click(sel('download-bundle')),
    ]);
    assert.equal(download.suggestedFilename(), `bundle-${job.id}.json`);

    // The check can fail: the same page, fed a record whose chunk 1 names a wrong predecessor
    // and whose last chunk's checksum was altered, marks exactly those two as broken.
    await page.route(`**/api/remote-runners/jobs/${job.id}`, async (route) => {
      const response = await route.fetch();
      const record = await response.json();
      const last = record.stream.length - 1;
      record.stream[1].previousChecksum = 'f'.repeat(64);
      // A different first digit (a fixed '0' would change nothing for one checksum in 16).
      const checksum = record.stream[last].checksum;
      record.stream[last].checksum = `${checksum[0] === '0' ? '1' : '0'}${checksum.slice(1)}`;
      await route.fulfill({ response, json: record });
    });
    await page.reload();
    // Generous under load (the suites share the machine's cores); on failure, say what showed.
    let seen = null;
    try {
      await waitFor('two broken links', async () => {
        seen = {
          broken: (await page.$$(sel('link-broken'))).length,
          ok: (await page.$$(sel('link-ok'))).length,
          rows: (await page.$$(sel('custody-chunk'))).length,
        };
        return seen.broken === 2;
      }, { timeout: 60000 });
    } catch (error) {
      throw new Error(`${error.message}; the page showed ${JSON.stringify(seen)} for a stream of ${done.stream.length} chunks`);
    }
    const broken = await page.$$eval(`${sel('custody-chunk')}[data-holds="false"]`, (rows) => rows.map((r) => Number(r.dataset.sequence)));
    assert.deepEqual(broken, [1, done.stream.length - 1]);
    assert.equal((await page.$$(sel('link-ok'))).length, done.stream.length - 2);
    await page.unroute(`**/api/remote-runners/jobs/${job.id}`);

    // The log keeps its newest 10,000 lines: fed a stream page of 10,005 lines (a chunk of
    // 10,002, more than the page keeps at once, then one of 3 that pushes the oldest out), the
    // page shows the last 10,000 and says how many it left out.
    const isStream = (url) => url.pathname.endsWith(`/api/remote-runners/jobs/${job.id}/stream`);
    const extra = 10005;
    const numbered = (from, to) => Array.from({ length: to - from + 1 }, (_, i) => `line ${from + i}\n`).join('');
    const logChunk = (sequence, text) => ({ ...done.stream[0], sequence, kind: 'log', payload: { segments: [{ stream: 'stdout', text }] } });
    await page.route(isStream, async (route) => {
      const chunks = [logChunk(0, numbered(1, 10002)), logChunk(1, numbered(10003, extra))];
      await route.fulfill({ json: { chunks, cursor: null, more: false, state: 'succeeded', dispatchAttempt: 1 } });
    });
    await page.reload();
    let log = null;
    try {
      await waitFor('the capped log', async () => {
        log = await page.$eval(sel('job-log-card'), (card) => ({
          lines: card.querySelectorAll('.log-line').length,
          notice: card.querySelector('[data-testid="log-notice"]:not([hidden])')?.textContent ?? null,
        }));
        return log.notice !== null;
      });
    } catch (error) {
      throw new Error(`${error.message}; the log showed ${JSON.stringify(log)}`);
    }
    assert.equal((await page.$$(`${sel('job-log')} .log-line`)).length, 10000);
    const shown = await texts(page, `${sel('log-line')} .log-text`);
    assert.equal(shown[0], `line ${extra - 9999}`);
    assert.equal(shown[shown.length - 1], `line ${extra}`);
    await page.locator(sel('job-log-card')).screenshot({ path: join(ARTIFACTS, 'log-capped.png') });
    assert.match(await text(page, sel('log-notice')), /^5 earlier line\(s\) are not shown: this page keeps the last 10,000\./);
    await page.unroute(isStream);
  });
});

test('an archived job\'s page reads as before: its transitions, a chain that holds, its log and its completion, now from R2', { timeout: 300000 }, async () => {
  const org = await newOrg('archived');
  const { runner, token } = await registerRunner(org, 'panel-archive-runner');
  const rel = await release(org);
  const job = await enqueue(org, rel, { question: 'archived?', weight: 2.5 });
  await runRunner({ runnerId: runner.id, token, exec: 'echo one; echo two >&2; echo three' });
  const before = await waitForFinished(org, job.id);
  assert.equal(before.state, 'succeeded', JSON.stringify(before));
  const archived = await ok(org.adminKey, 'POST', `/api/remote-runners/jobs/${job.id}/archive`, {});
  assert.equal(archived.state, 'pruned', JSON.stringify(archived));
  const after = await jobDetail(org, job.id);
  assert.deepEqual(after.archive, archived);
  assert.deepEqual({ ...after, archive: null }, { ...before, archive: null });

  await withPanel('archived-job', {}, async ({ page }) => {
    await signIn(page, org.adminKey);
    await page.goto(`${PANEL}/jobs/${job.id}`);
    await waitFor('the archived job page', async () => (await text(page, sel('job-detail-state'))) === 'succeeded', { timeout: 30000 });
    await waitFor('the log to be read to its end', async () => (await text(page, sel('log-status'))) === 'complete', { timeout: 30000 });
    assert.deepEqual(await texts(page, sel('event-type')), before.events.map((e) => e.type));
    await waitFor('every chunk row', async () => (await page.$$(sel('custody-chunk'))).length === before.stream.length);
    assert.equal((await page.$$(sel('link-ok'))).length, before.stream.length, 'every link holds');
    assert.equal((await page.$$(sel('link-broken'))).length, 0);
    const lines = await waitFor('the log lines', async () => {
      const found = await texts(page, `${sel('log-line')} .log-text`);
      return found.includes('three') ? found : false;
    });
    // stdout and stderr are batched apart, so only each stream's own order is the job's.
    assert.deepEqual(lines.filter((l) => ['one', 'three'].includes(l)), ['one', 'three']);
    assert.ok(lines.includes('two'), `the stderr line in ${lines}`);
    const accepted = before.completions.find((c) => c.decision === 'accepted');
    const completion = await page.$(`${sel('completion')}[data-decision="accepted"]`);
    assert.ok(completion, 'the accepted completion is shown');
    assert.equal(await completion.getAttribute('data-completion-id'), accepted.id);
    await page.screenshot({ path: join(ARTIFACTS, 'job-archived.png'), fullPage: true });
    const [download] = await Promise.all([
      page.waitForEvent('download', { timeout: 20000 }),
      page.click(sel('download-bundle')),
    ]);
    assert.equal(download.suggestedFilename(), `bundle-${job.id}.json`);
  });
});

test('cancels a queued job, then drains and revokes a runner, each with a recorded reason', { timeout: 240000 }, async () => {
  const org = await newOrg('actions');
  const rel = await release(org);
  const job = await enqueue(org, rel, { question: 'never run' });
  const { runner } = await registerRunner(org, 'panel-drain-me');
  const cancelReason = unique('no longer needed');
  const drainReason = unique('kernel upgrade');
  const revokeReason = unique('machine retired');

  await withPanel('actions', {}, async ({ page }) => {
    await signIn(page, org.adminKey);

    await page.goto(`${PANEL}/jobs/${job.id}`);
    await waitFor('the queued job', async () => (await text(page, sel('job-detail-state'))) === 'queued');
    await actWithReason(page, 'cancel', 'cancel-dialog', cancelReason);
    await waitFor('the job to show cancelled', async () => (await text(page, sel('job-detail-state'))) === 'cancelled');
    const cancelled = await waitFor('the job.cancelled transition with its reason', async () => {
      const rows = await page.$$eval(sel('job-event'), (els) => els.map((el) => ({
        type: el.dataset.type,
        reason: el.querySelector('[data-testid="event-reason"]')?.textContent ?? null,
      })));
      return rows.find((r) => r.type === 'job.cancelled' && r.reason === cancelReason);
    });
    assert.ok(cancelled);
    assert.equal(await page.$(sel('action-cancel')), null, 'no Cancel on a finished job');
    assert.equal((await jobDetail(org, job.id)).state, 'cancelled');

    await page.goto(`${PANEL}/runners/${runner.id}`);
    await waitFor('the runner page', async () => (await text(page, sel('runner-detail-state'))) === 'active');
    await actWithReason(page, 'drain', 'drain-dialog', drainReason);
    await waitFor('the runner to show draining', async () => (await text(page, sel('runner-detail-state'))) === 'draining');
    const eventReason = (type, reason) => waitFor(`${type} with its reason`, async () => {
      const rows = await page.$$eval(sel('runner-event'), (els) => els.map((el) => ({
        type: el.dataset.type,
        reason: el.querySelector('[data-testid="event-reason"]')?.textContent ?? null,
      })));
      return rows.find((r) => r.type === type && r.reason === reason);
    });
    await eventReason('runner.drained', drainReason);
    assert.ok(await page.$(sel('action-activate')), 'a draining runner can be activated');
    assert.equal(await page.$(sel('action-drain')), null, 'a draining runner is not offered Drain');

    await actWithReason(page, 'revoke', 'revoke-dialog', revokeReason, async (box, confirm) => {
      // A reason alone does not revoke: the name must be typed (or the box ticked).
      assert.equal(await confirm.isDisabled(), true, 'revoke needs the confirmation');
      await (await box.$(sel('revoke-name'))).fill('panel-drain-m');
      assert.equal(await confirm.isDisabled(), true, 'a wrong name does not confirm');
      await (await box.$(sel('revoke-name'))).fill('panel-drain-me');
    });
    await waitFor('the runner to show revoked', async () => (await text(page, sel('runner-detail-state'))) === 'revoked');
    await eventReason('runner.revoked', revokeReason);
    assert.deepEqual(await presentControls(page), [], 'a revoked runner offers no action');

    const audit = await ok(org.adminKey, 'GET', `/api/remote-runners/${runner.id}/events?limit=200`);
    const reasons = audit.events.map((e) => e.reason);
    assert.ok(reasons.includes(drainReason) && reasons.includes(revokeReason), JSON.stringify(audit.events));
  });
});

test('an admin holds a finished job and releases it; the Storage page shows the API\'s usage and sets retention', { timeout: 240000 }, async () => {
  const org = await newOrg('storage');
  const rel = await release(org);
  const job = await enqueue(org, rel, { question: 'kept for an audit' });
  await ok(org.adminKey, 'POST', `/api/remote-runners/jobs/${job.id}/cancel`, { reason: 'finished for the test' });
  const live = await enqueue(org, rel, { question: 'still queued' });
  const why = unique('audit');

  await withPanel('storage', {}, async ({ page }) => {
    await signIn(page, org.adminKey);
    await page.goto(`${PANEL}/jobs/${job.id}`);
    await waitFor('the cancelled job', async () => (await text(page, sel('job-detail-state'))) === 'cancelled');
    assert.equal(await page.$(sel('action-release')), null, 'nothing to release before a hold');
    await actWithReason(page, 'hold', 'hold-dialog', why);
    await waitFor('the hold on the page', async () => (await page.$(sel('job-hold-reason')))
      && (await text(page, sel('job-hold-reason'))) === why);
    assert.ok(await page.$(sel('job-detail-held')));
    assert.ok(await page.$(sel('action-release')));
    assert.equal(await page.$(sel('action-hold')), null);
    assert.equal((await jobDetail(org, job.id)).hold.reason, why);
    await page.screenshot({ path: join(ARTIFACTS, 'job-held.png'), clip: { x: 0, y: 0, width: 1440, height: 560 } });

    // The list marks the held job, and only it.
    await page.click(sel('tab-jobs'));
    await page.waitForSelector(`${sel('job-row')}[data-job-id="${job.id}"] ${sel('job-held')}`);
    await page.waitForSelector(`${sel('job-row')}[data-job-id="${live.id}"]`);
    assert.equal(await page.$(`${sel('job-row')}[data-job-id="${live.id}"] ${sel('job-held')}`), null);

    // Storage: the usage view's numbers, as the API counts them.
    await page.click(sel('tab-storage'));
    await page.waitForSelector(sel('usage-facts'));
    const usage = await ok(org.adminKey, 'GET', '/api/developer/usage');
    assert.deepEqual([usage.jobs.live, usage.jobs.held, usage.jobs.archived], [2, 1, 0]);
    for (const [testid, value] of [['usage-live', usage.jobs.live], ['usage-held', usage.jobs.held],
      ['usage-archived', usage.jobs.archived], ['usage-expiring', usage.jobs.expiring],
      ['usage-deleted', usage.jobs.deletedByRetention]]) {
      assert.equal(await text(page, sel(testid)), String(value), testid);
    }
    assert.equal(await page.getAttribute(sel('usage-oldest'), 'datetime'), usage.oldestJobAt);
    assert.match(await text(page, sel('usage-due')), /^would delete 0 archived jobs that finished before /);
    assert.equal(await page.inputValue(sel('retention-days')), '90');
    assert.equal(usage.d1.quotaBytes, 1073741824);
    assert.match(await text(page, sel('usage-quota-text')), / of 1 GiB \(\d+(\.\d+)?%\) — the deployment's default quota$/);
    assert.equal(await page.$eval(`${sel('usage-quota')} progress`, (el) => el.value),
      Math.round(Math.min(1, usage.d1.organizationBytes / usage.d1.quotaBytes) * 1000));

    // Retention: a value out of range is refused with the server's code; 30 is kept.
    await page.fill(sel('retention-days'), '401');
    await page.click(sel('retention-save'));
    await page.waitForSelector(`${sel('retention-card')} ${sel('error-code')}`);
    assert.equal(await text(page, `${sel('retention-card')} ${sel('error-code')}`), 'INVALID_RETENTION');
    await page.fill(sel('retention-days'), '30');
    await page.click(sel('retention-save'));
    await page.waitForSelector(sel('retention-saved'));
    assert.equal((await ok(org.adminKey, 'GET', '/api/developer/retention')).retentionDays, 30);
    await page.screenshot({ path: join(ARTIFACTS, 'storage.png'), fullPage: true });

    await page.setViewportSize({ width: 375, height: 812 });
    await page.reload();
    await page.waitForSelector(sel('usage-facts'));
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 0, `no horizontal scrolling at 375 px (overflow ${overflow} px)`);
    await page.screenshot({ path: join(ARTIFACTS, 'storage-375.png'), fullPage: true });
    await page.setViewportSize({ width: 1440, height: 900 });

    // Released from the job's page: no hold left, and Hold is offered again.
    await page.goto(`${PANEL}/jobs/${job.id}`);
    await page.click(sel('action-release'));
    await page.waitForSelector(sel('action-hold'));
    assert.equal(await page.$(sel('job-hold')), null);
    assert.equal((await jobDetail(org, job.id)).hold, undefined);
  });
});

test('a runs:read key sees lists and pages but no write control; a member key cannot register', { timeout: 240000 }, async () => {
  const org = await newOrg('readonly');
  const reader = await newKey(org, 'reader', ['runs:read'], 'member');
  const member = await newKey(org, 'member-all-scopes', ['runs:read', 'runs:write', 'admin:org'], 'member');
  const { runner } = await registerRunner(org, 'panel-visible-runner');
  const rel = await release(org);
  const job = await enqueue(org, rel, { question: 'queued for the reader' });

  await withPanel('readonly', {}, async ({ page }) => {
    await signIn(page, reader);
    assert.equal(await text(page, sel('identity-role')), 'member');
    assert.equal(await text(page, sel('identity-scopes')), 'runs:read');
    // A key made through the API ends (90 days by default), and the bar says when.
    const self = await ok(reader, 'GET', '/api/developer/api-keys/self');
    assert.equal(await page.getAttribute(sel('identity-expires'), 'datetime'), self.apiKey.expiresAt);
    assert.match(await text(page, sel('identity-expires')), /^in (89|90) d$/);
    await page.waitForSelector(`${sel('runner-row')}[data-runner-id="${runner.id}"]`);
    assert.deepEqual(await presentControls(page), []);

    await page.click(`${sel('runner-row')}[data-runner-id="${runner.id}"] ${sel('runner-name')}`);
    await page.waitForSelector(sel('runner-overview'));
    await page.waitForSelector(sel('runner-events'));
    assert.deepEqual(await presentControls(page), [], 'no runner action for runs:read');

    await page.click(sel('tab-jobs'));
    await page.waitForSelector(`${sel('job-row')}[data-job-id="${job.id}"]`);
    // Listed by what it runs: the artifact's name and version, the id still the link.
    const listed = `${sel('job-row')}[data-job-id="${job.id}"]`;
    assert.equal(await text(page, `${listed} ${sel('job-artifact-name')}`), rel.artifactName);
    assert.equal(await text(page, `${listed} ${sel('job-version')}`), `v${rel.versionId}`);
    assert.equal(await page.getAttribute(`${listed} ${sel('job-link')}`, 'href'), `/remote-runners/jobs/${job.id}`);
    assert.equal(await text(page, `${sel('count-queued')} .count-n`), '1');
    await page.click(`${sel('job-row')}[data-job-id="${job.id}"] ${sel('job-link')}`);
    await waitFor('the queued job page', async () => (await text(page, sel('job-detail-state'))) === 'queued');
    await page.waitForSelector(sel('download-bundle'));
    assert.deepEqual(await presentControls(page), [], 'no Cancel for runs:read');
    await page.click(sel('signout'));
    await page.waitForSelector(sel('signin-form'));

    // A member with every scope: Cancel (runs:write) yes, anything needing the admin role no.
    await signIn(page, member);
    await page.waitForSelector(`${sel('runner-row')}[data-runner-id="${runner.id}"]`);
    assert.equal(await page.$(sel('register-runner')), null, 'no Register for a member');
    await page.goto(`${PANEL}/runners/${runner.id}`);
    await page.waitForSelector(sel('runner-overview'));
    assert.deepEqual(await presentControls(page), [], 'no runner action for a member');
    await page.goto(`${PANEL}/jobs/${job.id}`);
    await page.waitForSelector(sel('action-cancel'));
  });

  const refused = await call(member, 'POST', '/api/remote-runners', {
    name: 'sneaky', runnerKey: unique('sneaky'),
    capabilities: { executionKinds: ['prompt'], runtimes: ['python3.12'] },
  });
  assert.equal(refused.status, 403, refused.text);
  assert.equal(refused.body.error.code, 'FORBIDDEN');
});

test('server text is rendered as text, never markup; the panel is served with its security headers', { timeout: 180000 }, async () => {
  const org = await newOrg('xss');
  const name = '<img src=x onerror=alert(1)>';
  const tag = '<svg onload=alert(2)>';
  const { runner } = await registerRunner(org, name);
  const reason = '<script>alert(3)</script>';
  await ok(org.adminKey, 'PATCH', `/api/remote-runners/${runner.id}`, { status: 'draining', tags: [tag], reason });

  await withPanel('xss', {}, async ({ page, dialogs }) => {
    const response = await page.goto(PANEL);
    const headers = response.headers();
    const csp = headers['content-security-policy'] || '';
    assert.ok(csp.includes("default-src 'self'"), csp);
    assert.ok(csp.includes("frame-ancestors 'none'"), csp);
    assert.ok(csp.includes("script-src 'self'"), csp);
    assert.ok(!/unsafe-inline|unsafe-eval/.test(csp), csp);
    assert.equal(headers['x-content-type-options'], 'nosniff');
    assert.equal(headers['referrer-policy'], 'no-referrer');
    assert.match(headers['content-type'], /^text\/html/);

    // Every sub-path is the same page, with the same headers; assets are nosniff.
    for (const path of [`/runners/${runner.id}`, '/jobs', '/jobs/job_anything']) {
      const sub = await fetch(`${PANEL}${path}`);
      assert.equal(sub.status, 200, path);
      assert.equal(sub.headers.get('content-security-policy'), csp, path);
      assert.ok((await sub.text()).includes('/remote-runners/static/app.js'), path);
    }
    for (const asset of ['app.js', 'style.css']) {
      const r = await fetch(`${PANEL}/static/${asset}`);
      assert.equal(r.status, 200, asset);
      assert.equal(r.headers.get('x-content-type-options'), 'nosniff', asset);
    }

    await page.waitForSelector(sel('signin-key'));
    await page.fill(sel('signin-key'), org.adminKey);
    await page.click(sel('signin-submit'));
    const row = `${sel('runner-row')}[data-runner-id="${runner.id}"]`;
    await page.waitForSelector(row);
    assert.equal(await page.textContent(`${row} ${sel('runner-name')}`), name);
    assert.ok((await text(page, row)).includes(tag), 'the tag shows as text');
    assert.equal(await page.$$eval('img, svg, script:not([src])', (els) => els.length), 0, 'no element made from server text');

    await page.click(`${row} ${sel('runner-name')}`);
    await page.waitForSelector(sel('runner-overview'));
    assert.equal(await page.textContent(sel('runner-title')), name);
    await page.waitForSelector(sel('runner-events'));
    assert.ok((await texts(page, sel('event-reason'))).includes(reason), 'the reason shows as text');
    assert.equal(await page.$$eval('img, svg, script:not([src])', (els) => els.length), 0);
    assert.deepEqual(dialogs, [], 'no dialog fired');
  });
});

test('approves a key-pair runner only with its printed fingerprint; rotates a bootstrap token shown once', { timeout: 240000 }, async () => {
  const org = await newOrg('identity');
  const scratch = mkdtempSync(join(tmpdir(), 'panel-enroll-'));
  let enrolled;
  try {
    const { stdout } = await run(EDGERUNNER_BIN, [
      'runner', 'enroll', '--server', BASE_URL, '--organization', org.organizationId,
      '--config', join(scratch, 'runner.json'), '--name', 'panel-keypair',
      '--execution-kind', 'prompt', '--runtime', 'python3.12', '--json',
    ], { env: { PATH: process.env.PATH || '/usr/bin:/bin', HOME: scratch, XDG_CONFIG_HOME: join(scratch, 'xdg') } });
    enrolled = JSON.parse(stdout);
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
  const keypairId = enrolled.runner.id;
  const printed = enrolled.fingerprint;
  assert.match(printed, /^SHA256:/);
  const { runner, token: oldToken } = await registerRunner(org, 'panel-rotate-me');
  const approveReason = unique('fingerprint compared');
  const rotateReason = unique('token exposed in CI log');

  await withPanel('identity', {}, async ({ page }) => {
    await signIn(page, org.adminKey);
    await page.goto(`${PANEL}/runners/${keypairId}`);
    await page.waitForSelector(sel('fingerprint-banner'));
    assert.match(await text(page, sel('fingerprint-banner')), /Compare this fingerprint with the one the runner printed/);
    assert.equal(await text(page, sel('fingerprint-banner-value')), printed);
    assert.equal(await page.$(sel('action-rotate')), null, 'a key-pair runner cannot rotate');
    assert.equal(await page.$(sel('action-drain')), null, 'a pending runner is not offered Drain');

    await actWithReason(page, 'approve', 'approve-dialog', approveReason, async (box, confirm) => {
      const input = await box.$(sel('approve-fingerprint'));
      assert.equal(await confirm.isDisabled(), true, 'no Approve without the fingerprint');
      await input.fill(`${printed.slice(0, -1)}x`);
      assert.equal(await confirm.isDisabled(), true, 'no Approve with another fingerprint');
      assert.match(await (await box.$(sel('approve-match'))).textContent(), /does not match/);
      await input.fill(printed);
    });
    await waitFor('the runner to show active', async () => (await text(page, sel('runner-detail-state'))) === 'active');
    assert.equal(await page.$(sel('fingerprint-banner')), null, 'no banner once approved');
    await waitFor('runner.approved with its reason', async () => {
      const rows = await page.$$eval(sel('runner-event'), (els) => els.map((el) => ({
        type: el.dataset.type,
        reason: el.querySelector('[data-testid="event-reason"]')?.textContent ?? null,
      })));
      return rows.some((r) => r.type === 'runner.approved' && r.reason === approveReason);
    });

    // Rotation: a new token, shown once; the old one is dead at once.
    await page.goto(`${PANEL}/runners/${runner.id}`);
    await waitFor('the bootstrap runner page', async () => (await text(page, sel('runner-detail-state'))) === 'active');
    await actWithReason(page, 'rotate', 'rotate-dialog', rotateReason);
    await page.waitForSelector(sel('token-dialog'));
    const newToken = await text(page, sel('bootstrap-token'));
    assert.match(newToken, /^erb_/);
    assert.notEqual(newToken, oldToken);
    await page.keyboard.press('Escape');
    await page.waitForSelector(sel('token-dialog'), { state: 'detached' });
    await pageHasNoToken(page);

    const stale = await call('', 'POST', '/api/remote-runners/session', { runnerId: runner.id, bootstrapToken: oldToken });
    assert.equal(stale.status, 401, stale.text);
    const fresh = await call('', 'POST', '/api/remote-runners/session', { runnerId: runner.id, bootstrapToken: newToken });
    assert.equal(fresh.status, 200, fresh.text);
    await waitFor('runner.rotated with its reason', async () => (await texts(page, sel('event-reason'))).includes(rotateReason));
  });
});

test('screenshots of the runners list, a finished job and the narrow layout', { timeout: 300000 }, async () => {
  const org = await newOrg('screens');
  const { runner, token } = await registerRunner(org, 'gpu-a100-01', { maxConcurrentJobs: 2 });
  const second = await registerRunner(org, 'cpu-pool-07');
  const third = await registerRunner(org, 'arm-builder-3');
  await ok(org.adminKey, 'PATCH', `/api/remote-runners/${second.runner.id}`, { status: 'draining', reason: 'kernel upgrade', tags: ['eu-west', 'cpu'] });
  await ok(org.adminKey, 'PATCH', `/api/remote-runners/${third.runner.id}`, { status: 'revoked', reason: 'machine retired' });
  const rel = await release(org);
  const job = await enqueue(org, rel, { question: 'What is the capital of France?' });
  await runRunner({
    runnerId: runner.id,
    token,
    exec: 'echo "loading model"; echo "scoring 3 cases"; echo "warning: slow tokenizer" >&2; echo "score=0.93"',
  });
  const done = await waitForFinished(org, job.id);
  assert.equal(done.state, 'succeeded');

  await withPanel('screens', { width: 1440, height: 900 }, async ({ page }) => {
    await signIn(page, org.adminKey);
    await page.waitForSelector(`${sel('runner-row')}[data-runner-id="${runner.id}"]`);
    await page.screenshot({ path: join(ARTIFACTS, 'runners.png') });

    // A draining runner's page: the actions its record offers, in the record's order.
    await page.goto(`${PANEL}/runners/${second.runner.id}`);
    await waitFor('the draining runner', async () => (await text(page, sel('runner-detail-state'))) === 'draining');
    assert.deepEqual(await presentControls(page), ['action-activate', 'action-revoke', 'action-rotate']);
    assert.deepEqual(
      await page.$$eval(`${sel('runner-actions')} button`, (els) => els.map((el) => el.dataset.testid)),
      ['action-activate', 'action-rotate', 'action-revoke'],
    );
    await page.screenshot({ path: join(ARTIFACTS, 'runner.png') });

    await page.goto(`${PANEL}/jobs`);
    await page.waitForSelector(`${sel('job-row')}[data-job-id="${job.id}"]`);
    await page.screenshot({ path: join(ARTIFACTS, 'jobs.png') });

    await page.goto(`${PANEL}/jobs/${job.id}`);
    await waitFor('every link to hold', async () => (await page.$$(sel('link-ok'))).length === done.stream.length);
    await waitFor('the log', async () => (await texts(page, sel('log-line'))).some((l) => l.includes('score=0.93')));
    await page.click(sel('evidence-button'));
    await page.waitForSelector(sel('evidence-run'));
    await page.screenshot({ path: join(ARTIFACTS, 'job.png'), fullPage: true });

    await page.setViewportSize({ width: 375, height: 812 });
    await page.goto(PANEL);
    await page.waitForSelector(`${sel('runner-row')}[data-runner-id="${runner.id}"]`);
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 0, `no horizontal scrolling of the page at 375 px (overflow ${overflow} px)`);
    await page.screenshot({ path: join(ARTIFACTS, 'runners-375.png') });
  });
});
