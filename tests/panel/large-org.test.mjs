// The panel's lists on a large organization: 1,000 runners and 10,000 jobs, opened in a real
// Chromium.
//
// Seeding: the first SEED_BY_API runners and jobs are made through the REST API, as an admin's
// tools would; the rest are copies of those rows with fresh ids made by one SQL statement each
// through `wrangler d1 execute` (the operator's tool, as scripts/bootstrap-admin uses it).
// Through the API alone, 11,000 writes take minutes on local D1; the lists only read the rows,
// and the copies satisfy every constraint and trigger of the schema, which checks them.
//
// It checks what must hold at that size — the first page of each list renders with the right
// rows, the counts at the top are the organization's, paging moves forward without repeating a
// row — and it measures (never asserts) how long each list takes to render: speed goals are
// measured, and the figures are printed and written to $PANEL_ARTIFACTS/large-org.json for
// BENCHMARKS.md.
//
// Environment as for panel.test.mjs. LARGE_ORG_RUNNERS / LARGE_ORG_JOBS override the sizes.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ARTIFACTS, BASE_URL, STATE_DIR, launchChromium, newOrg, pause } from './support.mjs';

const RUNNERS = Number(process.env.LARGE_ORG_RUNNERS || 1000);
const JOBS = Number(process.env.LARGE_ORG_JOBS || 10000);
const CONCURRENCY = 8;
const SEED_BY_API = 40;
const sel = (testid) => `[data-testid="${testid}"]`;

let browser;

before(async () => {
  assert.ok(BASE_URL, 'BASE_URL must name the running server');
  assert.ok(STATE_DIR, 'EDGERUNNER_STATE_DIR must name the server state directory');
  mkdirSync(ARTIFACTS, { recursive: true });
  browser = await launchChromium();
});

after(async () => {
  if (browser) await browser.close();
});

async function call(key, method, path, body) {
  // Bounded retries for the local runtime's transient busy answers only (never for a refusal).
  for (let attempt = 1; ; attempt += 1) {
    const response = await fetch(`${BASE_URL}${path}`, {
      method,
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    if (response.ok) return text ? JSON.parse(text) : null;
    if (response.status >= 500 && attempt < 3) continue;
    throw new Error(`${method} ${path} -> ${response.status} ${text}`);
  }
}

/**
 * One SQL statement against the server's local D1, as an operator would run it.
 *
 * The running server shares the database file, and its background writes (work finishing after
 * an answer, alarms) can hold the write lock at the moment the statement starts; SQLite then
 * answers SQLITE_BUSY and the statement writes nothing. Only that answer is tried again, a
 * bounded number of times, after a short pause; any other failure is thrown at once.
 */
async function d1(sql) {
  for (let attempt = 1; ; attempt += 1) {
    try {
      return await d1Once(sql);
    } catch (error) {
      if (!/SQLITE_BUSY|database is locked/.test(error.message) || attempt >= 5) throw error;
      await pause(500 * attempt);
    }
  }
}

function d1Once(sql) {
  return new Promise((resolvePromise, reject) => {
    execFile('node_modules/.bin/wrangler',
      ['d1', 'execute', 'DB', '--local', '--persist-to', STATE_DIR, '--yes', '--command', sql],
      { env: { ...process.env, WRANGLER_SEND_METRICS: 'false', CLOUDFLARE_CF_FETCH_ENABLED: 'false' } },
      (error, _stdout, stderr) => (error ? reject(new Error(`wrangler d1 execute failed: ${stderr}`)) : resolvePromise()));
  });
}

/** `count` copies of the rows `select` names, numbered 1..count, in one statement. */
function numbered(count) {
  return `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${count})`;
}

/** Runs `make(i)` for i in 0..count with at most CONCURRENCY in flight. */
async function inParallel(count, make) {
  let next = 0;
  const workers = Array.from({ length: CONCURRENCY }, async () => {
    while (next < count) {
      const i = next;
      next += 1;
      await make(i);
    }
  });
  await Promise.all(workers);
}

/** Milliseconds from navigation until `selector` has `rows` matches. */
async function timeToRows(page, url, selector, rows) {
  const started = Date.now();
  await page.goto(url);
  await page.waitForFunction(
    ([s, n]) => document.querySelectorAll(s).length >= n,
    [selector, rows],
    { timeout: 30000 },
  );
  return Date.now() - started;
}

test('1,000 runners and 10,000 jobs: the lists page correctly, and their render times are measured', { timeout: 900000 }, async () => {
  const org = await newOrg('large');
  const key = org.adminKey;

  const seedStarted = Date.now();
  const apiRunners = Math.min(SEED_BY_API, RUNNERS);
  await inParallel(apiRunners, (i) => call(key, 'POST', '/api/remote-runners', {
    name: `fleet-${String(i).padStart(4, '0')}`,
    runnerKey: `fleet-${i}`,
    maxConcurrentJobs: 4,
    tags: [`rack-${i % 10}`],
    capabilities: { executionKinds: ['prompt'], runtimes: ['python3.12'] },
  }));
  const artifact = await call(key, 'POST', '/api/releases/artifacts', { kind: 'prompt', name: 'large-org' });
  const version = await call(key, 'POST', `/api/releases/artifacts/${artifact.id}/versions`, { content: { template: 'x' } });
  await call(key, 'POST', `/api/releases/versions/${version.id}/promote`, { environment: 'staging' });
  const apiJobs = Math.min(SEED_BY_API, JOBS);
  await inParallel(apiJobs, (i) => call(key, 'POST', '/api/remote-runners/jobs', {
    idempotencyKey: `large-${i}`,
    subject: { kind: 'prompt', artifactId: artifact.id, versionId: version.id, environment: 'staging' },
    input: { n: i },
    // A runtime no runner serves, so that nothing claims them while the suite runs.
    requirements: {
      executionKind: 'prompt',
      runtime: 'large-org-none',
      limits: { cpuSeconds: 60, memoryMb: 512, wallSeconds: 60, outputBytes: 1048576 },
    },
  }));
  // The copies: registered / created before the API-made rows, one per millisecond.
  const org_ = org.organizationId.replace(/'/g, "''");
  if (RUNNERS > apiRunners) {
    await d1(`${numbered(RUNNERS - apiRunners)}
      INSERT INTO runners (id, organization_id, identity_model, name, runner_key, bootstrap_token_hash,
        state, capabilities, capabilities_hash, protocol_version, problem_types, external, tags,
        max_concurrent_jobs, registered_at, updated_at)
      SELECT 'run_copy' || printf('%016x', i) || substr(t.id, -8), t.organization_id, 'bootstrap',
        'fleet-copy-' || printf('%04d', i), 'fleet-copy-' || i,
        substr(t.bootstrap_token_hash, 1, 56) || printf('%08x', i),
        t.state, t.capabilities, t.capabilities_hash, t.protocol_version, t.problem_types, t.external,
        json_array('rack-' || (i % 10)), t.max_concurrent_jobs, t.registered_at - i, t.updated_at - i
      FROM n, (SELECT * FROM runners WHERE organization_id = '${org_}' ORDER BY registered_at LIMIT 1) AS t`);
  }
  if (JOBS > apiJobs) {
    await d1(`${numbered(JOBS - apiJobs)}
      INSERT INTO jobs (id, organization_id, idempotency_key, intent_hash, subject_kind, subject_artifact_id,
        subject_version_id, subject_content_hash, subject_environment, input, input_hash, requirements,
        execution_kind, runtime, external, problem_type, tags, state, dispatch_attempt, created_at, updated_at)
      SELECT 'job_copy' || printf('%016x', i) || substr(t.id, -8), t.organization_id, 'large-copy-' || i,
        t.intent_hash, t.subject_kind, t.subject_artifact_id, t.subject_version_id, t.subject_content_hash,
        t.subject_environment, t.input, t.input_hash, t.requirements, t.execution_kind, t.runtime, t.external,
        t.problem_type, t.tags, 'queued', 0, t.created_at - i, t.updated_at - i
      FROM n, (SELECT * FROM jobs WHERE organization_id = '${org_}' ORDER BY created_at LIMIT 1) AS t`);
  }
  const listedJobs = await call(key, 'GET', '/api/remote-runners/jobs?limit=1');
  assert.equal(listedJobs.counts.queued, JOBS, 'every seeded job is queued');
  const seedSeconds = (Date.now() - seedStarted) / 1000;

  const context = await browser.newContext({ viewport: { width: 1440, height: 900 } });
  const page = await context.newPage();
  await page.goto(`${BASE_URL}/remote-runners`);
  await page.fill(sel('signin-key'), key);
  await page.click(sel('signin-submit'));
  await page.waitForSelector(sel('topbar'));

  // Each list twice: the first load also warms the server's objects; both are reported.
  const runnersMs = [];
  const jobsMs = [];
  for (let round = 0; round < 2; round += 1) {
    runnersMs.push(await timeToRows(page, `${BASE_URL}/remote-runners`, sel('runner-row'), 50));
    jobsMs.push(await timeToRows(page, `${BASE_URL}/remote-runners/jobs`, sel('job-row'), 50));
  }

  // The jobs page: the organization's counts, newest first.
  const queued = (await page.textContent(`${sel('count-queued')} .count-n`)).trim().replace(/[,\s]/g, '');
  assert.equal(queued, String(JOBS));
  const firstJobs = await page.$$eval(sel('job-row'), (rows) => rows.map((r) => r.dataset.jobId));
  assert.equal(firstJobs.length, 50);
  const newest = await call(key, 'GET', '/api/remote-runners/jobs?limit=50');
  assert.deepEqual(firstJobs, newest.jobs.map((j) => j.id));

  // Paging forward shows the next 50, none repeated.
  await page.click(sel('jobs-next'));
  await page.waitForFunction(
    (first) => {
      const ids = [...document.querySelectorAll('[data-testid="job-row"]')].map((r) => r.dataset.jobId);
      return ids.length === 50 && !ids.includes(first);
    },
    firstJobs[0],
    { timeout: 30000 },
  );
  const secondJobs = await page.$$eval(sel('job-row'), (rows) => rows.map((r) => r.dataset.jobId));
  assert.equal(new Set([...firstJobs, ...secondJobs]).size, 100);

  // The runners list: registration order, the first page is the first 50 registered names.
  await page.goto(`${BASE_URL}/remote-runners`);
  await page.waitForFunction((n) => document.querySelectorAll('[data-testid="runner-row"]').length >= n, 50);
  const names = await page.$$eval(sel('runner-name'), (cells) => cells.map((c) => c.textContent));
  assert.equal(names.length, 50);
  const firstRunners = await call(key, 'GET', '/api/remote-runners?limit=50');
  assert.deepEqual(names, firstRunners.runners.map((r) => r.name));
  // The summary is the whole fleet's, not the page's: every runner takes up to 4 jobs.
  const summary = await page.textContent(sel('runners-summary'));
  assert.match(summary, new RegExp(`^${RUNNERS.toLocaleString('en-US')} runners · ${RUNNERS.toLocaleString('en-US')} active`));
  assert.ok(summary.endsWith(`0 / ${(4 * RUNNERS).toLocaleString('en-US')} job slots in use`), summary);

  const report = {
    runners: RUNNERS,
    jobs: JOBS,
    seedSeconds,
    runnersListMs: runnersMs,
    jobsListMs: jobsMs,
  };
  writeFileSync(join(ARTIFACTS, 'large-org.json'), `${JSON.stringify(report, null, 2)}\n`);
  console.log(`large org: ${JSON.stringify(report)}`);
  await context.close();
});
