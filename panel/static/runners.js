// The Runners tab: the list, a runner's page, registration and every status action.

import { get, post, patch, getText, query, enc } from './api.js';
import {
  h, replace, clear, timeAgo, badge, mono, hash, facts, card, emptyState, richText, errorBox,
  jsonText, formatBytes, formatSeconds, formatMb, table, row, keepFocus, poller, chips, yesNo,
  pager, syncRows,
} from './dom.js';
import { openDialog, reasonDialog, copyBlock } from './dialog.js';

const PAGE_SIZE = 50;
const POLL_MS = 5000;

// What a registration may declare (its execution kinds, and the limits a runner gets when it
// declares none, which are also the most it may declare) is the API's to say.
const REGISTRATION = '/api/remote-runners/registration';

export function runnerHref(base, id) {
  return `${base}/runners/${enc(id)}`;
}

// ------------------------------------------------------------------------------------------
// The list
// ------------------------------------------------------------------------------------------

const LIST_COLUMNS = ['Name', 'Runner key', 'Identity', 'State', 'Connection', 'Capacity', 'Last heartbeat', 'Last seen', 'Product', 'Tags'];

/** Whether the runner talks to us, as the API says it (`connection`): beside its admin state. */
function connectionCell(connection, testid) {
  const status = connection?.status ?? 'unknown';
  return h('span.connection', { testid, dataset: { status } },
    badge(status),
    status === 'offline' && connection.since ? [h('span.muted', ' since '), timeAgo(connection.since)] : null);
}

function runnerRow(base, runner) {
  const capacity = `${runner.activeClaims ?? 0} / ${runner.maxConcurrentJobs ?? '—'}`;
  const full = (runner.activeClaims ?? 0) >= (runner.maxConcurrentJobs ?? Infinity);
  return row([
    h('a.strong', { href: runnerHref(base, runner.id), testid: 'runner-name', dataset: { key: runner.id } }, runner.name || runner.id),
    mono(runner.runnerKey, { testid: 'runner-key' }),
    h('span.ident', { testid: 'runner-identity' }, runner.identityModel === 'keypair' ? 'key pair' : 'bootstrap token'),
    h('div.state-cell',
      badge(runner.state, 'runner-state'),
      runner.stateReason ? h('div.reason.muted', { title: runner.stateReason, testid: 'runner-state-reason' }, runner.stateReason) : null),
    connectionCell(runner.connection, 'runner-connection'),
    h('span', { class: full ? 'capacity capacity-full' : 'capacity', testid: 'runner-capacity' }, capacity),
    timeAgo(runner.lastHeartbeatAt, 'runner-heartbeat'),
    timeAgo(runner.lastSeenAt, 'runner-last-seen'),
    runner.product || runner.version
      ? h('span', { testid: 'runner-product' }, [runner.product, runner.version].filter(Boolean).join(' '))
      : h('span.muted', '—'),
    chips(runner.tags, '—'),
  ], { testid: 'runner-row', dataset: { runnerId: runner.id, sig: JSON.stringify(runner) } }, LIST_COLUMNS);
}

export function runnersView(ctx) {
  const { session, base } = ctx;
  let destroyed = false;
  let loadedOnce = false;

  const tbody = h('tbody', { testid: 'runners-body' });
  const tableEl = table(LIST_COLUMNS, tbody, 'runners-table');
  const status = h('div.status-area', { 'aria-live': 'polite' });
  const empty = h('div');
  const paging = pager('runners', () => {
    clear(tbody);
    return load();
  });
  const summary = h('span.muted.head-note', { testid: 'runners-summary' }, '');

  const register = session.canAdmin
    ? h('button.btn.btn-primary', { type: 'button', testid: 'register-runner' }, 'Register runner')
    : null;
  const enrollment = session.canAdmin
    ? h('a.btn', { href: `${base}/enrollment`, testid: 'enrollment-link' }, 'Enrollment')
    : null;

  const el = h('div.view.view-runners', { testid: 'runners-view' },
    h('div.page-head',
      h('div', h('h1', 'Runners'), summary),
      h('div.page-actions', enrollment, register)),
    status,
    empty,
    tableEl,
    paging.el);

  async function load({ quiet = false } = {}) {
    let data;
    try {
      data = await get(`/api/remote-runners${query({ limit: PAGE_SIZE, cursor: paging.cursor() })}`);
    } catch (error) {
      if (!destroyed) replace(status, errorBox(error));
      if (!quiet) throw error;
      return;
    }
    if (destroyed) return;
    clear(status);
    loadedOnce = true;
    renderRows(data.runners || []);
    paging.update(data.nextCursor);
    summary.textContent = fleetSummary(data);
  }

  /** The whole organization's fleet (not just this page): runners by state, capacity in use. */
  function fleetSummary(data) {
    const counts = data.counts || {};
    const total = Object.values(counts).reduce((sum, n) => sum + n, 0);
    if (!total) return '';
    const n = (x) => Number(x).toLocaleString('en-US');
    const parts = [`${n(total)} runner${total === 1 ? '' : 's'}`];
    // The states in the API's order (`states`).
    for (const state of data.states || Object.keys(counts)) {
      if (counts[state]) parts.push(`${n(counts[state])} ${state.replace(/_/g, ' ')}`);
    }
    const capacity = data.capacity;
    if (capacity) parts.push(`${n(capacity.inUse)} / ${n(capacity.maximum)} job slots in use`);
    return parts.join(' · ');
  }

  function renderRows(runners) {
    if (runners.length === 0 && paging.onFirstPage()) {
      tableEl.hidden = true;
      replace(empty, emptyState(richText(session.canAdmin
        ? 'No runners yet. Choose Register runner, or enroll one with `edgerunner runner enroll`.'
        : 'No runners yet. An admin can register one, or a machine can enroll itself with `edgerunner runner enroll`.')));
      return;
    }
    tableEl.hidden = false;
    clear(empty);
    syncRows(tbody, runners, (runner) => runner.id, (runner) => runnerRow(base, runner));
  }

  if (register) {
    register.addEventListener('click', () => openRegistration({ onRegistered: () => load({ quiet: true }), status }));
  }

  load().catch(() => {});
  const stop = poller(() => load({ quiet: true }), POLL_MS);
  return {
    el,
    destroy() {
      destroyed = true;
      stop();
    },
    get loaded() {
      return loadedOnce;
    },
  };
}

// ------------------------------------------------------------------------------------------
// Registration and the one-time token
// ------------------------------------------------------------------------------------------

function field(label, control, help, id) {
  return h('div.field',
    h('label', { htmlFor: id }, label),
    control,
    help ? h('div.help', help) : null);
}

/** Reads what a registration may declare, then opens the dialog (or says why it cannot). */
function openRegistration({ onRegistered, status }) {
  get(REGISTRATION)
    .then((registration) => {
      replace(status);
      registerDialog({ onRegistered, registration });
    })
    .catch((error) => replace(status, errorBox(error)));
}

export function registerDialog({ onRegistered, registration }) {
  const ceilings = registration.defaultLimits;
  const name = h('input#reg-name', { type: 'text', required: true, testid: 'register-name', maxLength: 200, autocomplete: 'off' });
  const key = h('input#reg-key', { type: 'text', required: true, testid: 'register-key', maxLength: 200, autocomplete: 'off', spellcheck: false });
  const runtimes = h('input#reg-runtimes', { type: 'text', required: true, testid: 'register-runtimes', placeholder: 'python3.12 nodejs20', autocomplete: 'off', spellcheck: false });
  const max = h('input#reg-max', { type: 'number', min: 1, max: 1000, step: 1, value: '1', testid: 'register-max', required: true });
  const kinds = registration.executionKinds.map((kind) => h('input', { type: 'checkbox', value: kind, id: `reg-kind-${kind}`, testid: `register-kind-${kind}` }));
  const kindsField = h('fieldset.field.kinds',
    h('legend', 'Execution kinds (at least one)'),
    h('div.checks', kinds.map((box) => h('label.check', { htmlFor: box.id }, box, ' ', box.value))));

  const narrow = {};
  const limitRows = [
    ['cpuSeconds', 'CPU seconds', ceilings.cpuSeconds, formatSeconds(ceilings.cpuSeconds)],
    ['memoryMb', 'Memory (MB)', ceilings.memoryMb, formatMb(ceilings.memoryMb)],
    ['wallSeconds', 'Wall seconds', ceilings.wallSeconds, formatSeconds(ceilings.wallSeconds)],
    ['outputBytes', 'Output bytes', ceilings.outputBytes, `${formatBytes(ceilings.outputBytes)} (${ceilings.outputBytes} bytes)`],
  ].map(([prop, label, ceiling, shown]) => {
    const input = h('input', {
      type: 'number', min: 1, max: ceiling, step: 1, id: `reg-limit-${prop}`, testid: `register-limit-${prop}`,
      placeholder: String(ceiling), 'aria-label': `Narrower ${label}`,
    });
    narrow[prop] = { input, ceiling, label };
    return h('tr', h('th', { scope: 'row' }, label),
      h('td', { dataset: { label: 'Default ceiling' } }, shown),
      h('td', { dataset: { label: 'Narrower' } }, input));
  });

  const boundary = h('div.boundary', { testid: 'register-boundary' },
    h('h3', 'Default-deny boundary (review)'),
    facts([
      ['Network', h('code', 'deny_all')],
      ['Streaming', 'supported'],
      ['Cancellation', 'supported'],
    ]),
    h('div.table-wrap.table-compact',
      h('table.grid',
        h('thead', h('tr', h('th', { scope: 'col' }, 'Limit'), h('th', { scope: 'col' }, 'Default ceiling'), h('th', { scope: 'col' }, 'Narrower (optional)'))),
        h('tbody', limitRows))),
    h('p.help', 'Narrower limits may only lower the ceiling. Leave blank to keep the default.'));

  const status = h('div.dialog-status', { 'aria-live': 'polite' });
  const submit = h('button.btn.btn-primary', { type: 'submit', testid: 'register-submit' }, 'Register identity');
  const cancel = h('button.btn', { type: 'button', testid: 'cancel' }, 'Cancel');
  const form = h('form.dialog-form', { noValidate: true, testid: 'register-form' },
    field('Display name', name, null, 'reg-name'),
    field('Runner key (stable, unique in the organization)', key, 'e.g. gpu-1. The runner keeps this key across rotations.', 'reg-key'),
    field('Runtimes', runtimes, 'Separated by commas or spaces, e.g. python3.12 nodejs20', 'reg-runtimes'),
    kindsField,
    field('Max concurrent jobs', max, null, 'reg-max'),
    boundary,
    status,
    h('div.form-actions', cancel, submit));

  const { close } = openDialog({ title: 'Register runner', testid: 'register-dialog', body: form, wide: true });
  cancel.addEventListener('click', close);
  name.focus();

  function validate() {
    const problems = [];
    if (!name.value.trim()) problems.push('Enter a display name.');
    if (!key.value.trim()) problems.push('Enter a runner key.');
    const rt = runtimes.value.split(/[\s,]+/).filter(Boolean);
    if (rt.length === 0) problems.push('Enter at least one runtime.');
    const chosen = kinds.filter((k) => k.checked).map((k) => k.value);
    if (chosen.length === 0) problems.push('Choose at least one execution kind.');
    const maxJobs = Number(max.value);
    if (!Number.isInteger(maxJobs) || maxJobs < 1 || maxJobs > 1000) problems.push('Max concurrent jobs must be a whole number from 1 to 1000.');
    let limits = null;
    for (const [prop, { input, ceiling, label }] of Object.entries(narrow)) {
      const text = input.value.trim();
      input.removeAttribute('aria-invalid');
      if (!text) continue;
      const value = Number(text);
      if (!Number.isInteger(value) || value < 1 || value > ceiling) {
        problems.push(`${label} must be a whole number from 1 to ${ceiling} (it may only lower the default).`);
        input.setAttribute('aria-invalid', 'true');
        continue;
      }
      limits = limits || { ...ceilings };
      limits[prop] = value;
    }
    return { problems, rt, chosen, maxJobs, limits };
  }

  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const { problems, rt, chosen, maxJobs, limits } = validate();
    if (problems.length) {
      replace(status, h('div.error', { role: 'alert', testid: 'error' },
        h('strong.error-code', { testid: 'error-code' }, 'INVALID_INPUT'), ' ',
        h('span', { testid: 'error-message' }, problems.join(' '))));
      return;
    }
    const capabilities = { executionKinds: chosen, runtimes: rt, maxConcurrentJobs: maxJobs };
    if (limits) capabilities.limits = limits;
    submit.disabled = true;
    replace(status, h('span.muted', 'Registering…'));
    try {
      const answer = await post('/api/remote-runners', {
        name: name.value.trim(),
        runnerKey: key.value.trim(),
        maxConcurrentJobs: maxJobs,
        capabilities,
      });
      close();
      tokenDialog({
        title: 'Runner registered',
        runner: answer.runner,
        token: answer.bootstrapToken,
      });
      if (onRegistered) onRegistered(answer.runner);
    } catch (error) {
      replace(status, errorBox(error));
      submit.disabled = false;
    }
  });
}

/**
 * Shows a bootstrap token once. The token lives only in this function's closure and in the
 * dialog's nodes; closing the dialog removes them, and nothing is written to any storage.
 */
export function tokenDialog({ title, runner, token, onClose }) {
  const origin = location.origin;
  const env = [
    `EVALGATE_BASE_URL=${origin}`,
    `EVALGATE_RUNNER_ID=${runner.id}`,
    `EVALGATE_RUNNER_BOOTSTRAP_TOKEN=${token}`,
  ].join('\n');
  const cli = "edgerunner runner start --exec './evaluate.sh'";
  const sdk = 'RemoteRunnerWorker(base_url=os.environ["EVALGATE_BASE_URL"], runner_id=os.environ["EVALGATE_RUNNER_ID"], bootstrap_token=os.environ["EVALGATE_RUNNER_BOOTSTRAP_TOKEN"])';
  const done = h('button.btn.btn-primary', { type: 'button', testid: 'token-done' }, 'I have stored it — close');
  const body = h('div.token-body', { testid: 'token-body' },
    h('div.warning', { role: 'alert', testid: 'token-warning' },
      h('strong', 'This token is shown once. Store it in your secret manager now; it cannot be recovered.'),
      ' Closing this dialog or reloading the page loses it for good; you would have to rotate to get a new one.'),
    facts([
      ['Runner', h('span', runner.name || '')],
      ['Runner id', mono(runner.id, { testid: 'token-runner-id' })],
    ]),
    copyBlock('Bootstrap token', token, 'bootstrap-token'),
    copyBlock('Environment variables', env, 'token-env'),
    copyBlock('Start the runner (CLI)', cli, 'token-cli'),
    copyBlock('Or with the Python SDK', `import os\nfrom evalgate_sdk.remote_runner import RemoteRunnerWorker\n\nworker = ${sdk}`, 'token-sdk'));
  const { close } = openDialog({ title, testid: 'token-dialog', body, footer: done, wide: true, onClose });
  done.addEventListener('click', close);
  done.focus();
}

// ------------------------------------------------------------------------------------------
// A runner's page
// ------------------------------------------------------------------------------------------

function capabilitiesView(runner) {
  const caps = runner.capabilities || {};
  const limits = caps.limits || {};
  const network = caps.network;
  let networkText;
  if (!network || network === 'deny_all' || network.mode === 'deny_all') networkText = h('span', h('code', 'deny_all'), ' (no outbound network)');
  else if (network.mode === 'allowlist') networkText = h('span', h('code', 'allowlist'), ' ', chips(network.origins));
  else networkText = h('code', jsonText(network));
  const problemTypes = runner.problemTypes?.length ? runner.problemTypes : caps.problemTypes;
  return h('div', { testid: 'runner-capabilities' },
    facts([
      ['Execution kinds', chips(caps.executionKinds)],
      ['Runtimes', chips(caps.runtimes)],
      ['CPU', formatSeconds(limits.cpuSeconds)],
      ['Memory', formatMb(limits.memoryMb)],
      ['Wall time', formatSeconds(limits.wallSeconds)],
      ['Output', limits.outputBytes === undefined ? null : `${formatBytes(limits.outputBytes)} (${limits.outputBytes} bytes)`],
      ['Network', networkText],
      ['Streaming', caps.streaming === undefined ? null : (caps.streaming ? 'supported' : 'not supported')],
      ['Cancellation', caps.cancellation === undefined ? null : (caps.cancellation ? 'supported' : 'not supported')],
      ['Max concurrent jobs', String(caps.maxConcurrentJobs ?? runner.maxConcurrentJobs ?? '—')],
      ['Problem types', chips(problemTypes)],
      ['External', yesNo(runner.external ?? caps.external)],
      ['Protocol version', caps.protocolVersion ?? runner.protocolVersion ?? null],
      ['Capability hash', mono(runner.capabilityHash, { testid: 'runner-capability-hash' })],
    ]));
}

/** The file an edgerunner runner uploads at start-up: what it enforces on its host. */
const ISOLATION_FILE = 'isolation.json';

function isolationView(runner, isolation) {
  const file = (runner.files || []).find((f) => f.name === ISOLATION_FILE);
  if (!file) {
    return h('p.muted', { testid: 'runner-isolation-none' },
      'This runner has not reported what it enforces on its host (the edgerunner CLI does at start-up; an SDK runner does not). Its capabilities are what it declares.');
  }
  if (!isolation || isolation.error) return errorBox(isolation?.error || new Error('not read'), 'isolation.json: ');
  const held = (value, yes, no) => h('span', { dataset: { held: String(value === true) } },
    value === true ? yes : value === false ? no : h('span.muted', '—'));
  return h('div', { testid: 'runner-isolation' },
    facts([
      ['Own session', held(isolation.session, 'yes: no controlling terminal', 'no')],
      ['Processes end with the job', held(isolation.processSweep, 'yes: every process a job starts is killed with it', 'no: a job\'s leftover processes may outlive it')],
      ['Processes held by', h('span', { testid: 'runner-isolation-containment' },
        isolation.processContainment === 'cgroup' ? 'a cgroup per job: no process of it can leave, all end together'
          : isolation.processContainment === 'subreaper' ? 'a subreaper per job: what a job leaves behind is killed with it'
            : h('span.muted', '—'))],
      ['Memory limit', h('span', { testid: 'runner-isolation-memory' },
        isolation.memoryLimit === 'cgroup' ? 'per job, its processes together (its cgroup)'
          : isolation.memoryLimit === 'rlimit' ? 'per process, address space (RLIMIT_AS)'
            : h('span.muted', '—'))],
      ['network: deny_all', held(isolation.networkDenyAll, 'enforced: a network namespace with no interfaces', 'not on this host: deny_all jobs are refused')],
      ['Limits enforced', h('span', chips(isolation.rlimits), ' per process (rlimits)')],
      ['Reported', timeAgo(file.uploadedAt)],
    ]),
    h('p.help', 'As the runner reported it when it started; it is the runner\'s own account of its host.'));
}

function valueText(value) {
  if (value === null || value === undefined) return h('span.muted', '—');
  if (typeof value === 'object') return h('code.json-inline', jsonText(value));
  return String(value);
}

function machineView(machine) {
  if (!machine || typeof machine !== 'object' || Object.keys(machine).length === 0) {
    return h('p.muted', 'The runner reported no machine details.');
  }
  return facts(Object.entries(machine).map(([k, v]) => [k, valueText(v)]), 'runner-machine');
}

function filesView(runner) {
  const files = runner.files || [];
  if (files.length === 0) return h('p.muted', 'No files uploaded. Runners can upload diagnostics (e.g. lscpu.txt) with their credential.');
  const labels = ['Name', 'Size', 'Content hash', 'Uploaded', ''];
  return table(labels, h('tbody', files.map((file) => row([
    mono(file.name),
    formatBytes(file.size),
    hash(file.contentHash),
    timeAgo(file.uploadedAt),
    h('button.btn.btn-small', {
      type: 'button', testid: 'file-view', dataset: { key: file.name },
      on: { click: () => fileDialog(runner, file) },
    }, 'View'),
  ], { testid: 'runner-file' }, labels))), 'runner-files');
}

function fileDialog(runner, file) {
  const pre = h('pre.file-text', { testid: 'file-text', tabIndex: 0 }, 'Loading…');
  openDialog({ title: file.name, testid: 'file-dialog', body: pre, wide: true });
  getText(`/api/remote-runners/${enc(runner.id)}/files/${enc(file.name)}`)
    .then((text) => { pre.textContent = text; })
    .catch((error) => replace(pre.parentNode, errorBox(error)));
}

function claimsView(base, claims) {
  // Which claims hold their job now is the API's to say (`held`).
  const active = claims.filter((c) => c.held);
  const labels = ['Job', 'Ran', 'Claim', 'Attempt', 'State', 'Issued', 'Lease expires', 'Ended', 'End reason'];
  const claimRow = (c) => row([
    h('a.mono', { href: `${base}/jobs/${enc(c.jobId)}`, testid: 'claim-job', dataset: { key: c.id }, title: c.jobId }, c.jobId),
    c.artifactName ? h('span', { testid: 'claim-ran' }, `${c.artifactName} v${c.versionId}`) : h('span.muted', '—'),
    mono(c.id, { short: 14 }),
    String(c.dispatchAttempt ?? '—'),
    badge(c.state),
    timeAgo(c.issuedAt),
    c.held ? timeAgo(c.leaseExpiresAt) : h('span.muted', '—'),
    timeAgo(c.endedAt),
    c.endReason ? h('span', c.endReason) : h('span.muted', '—'),
  ], { testid: 'runner-claim', dataset: { state: c.state } }, labels);
  return h('div',
    h('h3.sub', `Active claims (${active.length})`),
    active.length
      ? table(labels, h('tbody', active.map(claimRow)), 'runner-active-claims')
      : h('p.muted', { testid: 'runner-no-active-claims' }, 'No active claims: this runner is not holding a job right now.'),
    claims.length > active.length
      ? [h('h3.sub', 'Recent claims'), table(labels, h('tbody', claims.filter((c) => !c.held).map(claimRow)), 'runner-recent-claims')]
      : null);
}

function eventsView(base, events) {
  if (!events.length) return h('p.muted', 'No audit events yet.');
  const labels = ['Time', 'Event', 'Actor', 'Reason', 'Job', 'Detail'];
  // The list answers newest first (issue 41); the panel shows its first page.
  const rows = events.map((e) => row([
    timeAgo(e.at),
    h('code.event-type', { testid: 'event-type' }, e.type),
    h('span', e.actor ?? '—'),
    e.reason ? h('span.event-reason', { testid: 'event-reason' }, e.reason) : h('span.muted', '—'),
    e.jobId ? h('a.mono', { href: `${base}/jobs/${enc(e.jobId)}`, title: e.jobId }, e.jobId) : h('span.muted', '—'),
    e.detail && (typeof e.detail !== 'object' || Object.keys(e.detail).length)
      ? h('code.json-inline', { title: jsonText(e.detail) }, JSON.stringify(e.detail))
      : h('span.muted', '—'),
  ], { testid: 'runner-event', dataset: { type: e.type } }, labels));
  return h('div',
    h('p.help', 'Newest first.'),
    table(labels, h('tbody', rows), 'runner-events'));
}

const ACTION_LABELS = { approve: 'Approve', drain: 'Drain', activate: 'Activate', revoke: 'Revoke', rotate: 'Rotate token' };

// The actions the API says apply to the runner in its state (`actions`, in its order), for a
// key that may administer; one this page has no dialog for is left out.
function actionsFor(runner, session) {
  if (!session.canAdmin) return [];
  return (runner.actions || []).filter((a) => Object.hasOwn(ACTION_LABELS, a));
}

export function runnerView(ctx, id) {
  const { session, base } = ctx;
  let destroyed = false;
  let runner = null;
  let lastSig = '';
  let actionsSig = '';

  const title = h('h1.title-text', { testid: 'runner-title' }, 'Runner');
  const stateSlot = h('span');
  const subtitle = h('div.subtitle');
  const actions = h('div.page-actions', { testid: 'runner-actions' });
  const banner = h('div');
  const status = h('div.status-area', { 'aria-live': 'polite' });
  const sections = h('div.cards', { testid: 'runner-sections' }, h('div.loading', 'Loading…'));
  const el = h('div.view.view-runner', { testid: 'runner-view' },
    h('nav.crumbs', { 'aria-label': 'Breadcrumb' }, h('a', { href: base }, 'Runners'), ' / ', h('span', id)),
    h('div.page-head',
      h('div', h('div.title-row', title, stateSlot), subtitle),
      actions),
    status,
    banner,
    sections);

  async function load() {
    let data;
    try {
      data = await Promise.all([
        get(`/api/remote-runners/${enc(id)}`),
        get(`/api/remote-runners/${enc(id)}/events${query({ limit: 200 })}`).catch((e) => ({ error: e })),
        get(`/api/remote-runners/${enc(id)}/claims${query({ limit: 50 })}`).catch((e) => ({ error: e })),
      ]);
    } catch (error) {
      if (!destroyed) replace(status, errorBox(error));
      return;
    }
    if (destroyed) return;
    clear(status);
    const [r, ev, cl] = data;
    const iso = (r.files || []).some((f) => f.name === ISOLATION_FILE)
      ? await getText(`/api/remote-runners/${enc(id)}/files/${ISOLATION_FILE}`)
        .then((text) => JSON.parse(text)).catch((e) => ({ error: e }))
      : null;
    if (destroyed) return;
    runner = r;
    render(r, ev, cl, iso);
  }

  function render(r, ev, cl, iso) {
    document.title = `${r.name || r.id} · Runners · edgerunner`;
    title.textContent = r.name || r.id;
    replace(stateSlot, badge(r.state, 'runner-detail-state'));
    replace(subtitle,
      mono(r.id, { testid: 'runner-id' }),
      ' · ', r.identityModel === 'keypair' ? 'key-pair identity' : 'bootstrap-token identity',
      r.stateReason ? [' · ', h('span', { testid: 'runner-detail-reason' }, r.stateReason)] : null);

    const nextActions = actionsFor(r, session);
    const sigA = `${nextActions.join(',')}|${r.fingerprint}`;
    if (sigA !== actionsSig) {
      actionsSig = sigA;
      keepFocus(actions, () => replace(actions, nextActions.map((a) => actionButton(a))));
    }

    if (r.identityModel === 'keypair' && r.state === 'pending_approval') {
      replace(banner, h('div.banner.banner-info', { testid: 'fingerprint-banner', role: 'note' },
        h('div.banner-title', 'Compare this fingerprint with the one the runner printed'),
        h('code.fingerprint', { testid: 'fingerprint-banner-value' }, r.fingerprint || '—'),
        h('p', 'This runner enrolled itself with a key pair and is waiting for approval. Approve it only if the fingerprint above is exactly the one shown on the machine by ',
          h('code', 'edgerunner runner enroll'), ' or ', h('code', 'edgerunner runner whoami'), '.')));
    } else {
      clear(banner);
    }

    const sig = JSON.stringify([r, ev, cl, iso]);
    if (sig === lastSig) return;
    lastSig = sig;
    const events = ev?.events || [];
    const claims = cl?.claims || [];
    keepFocus(sections, () => replace(sections,
      card('Overview', facts([
        ['State', h('span', badge(r.state), r.stateReason ? h('span.muted', ` ${r.stateReason}`) : null)],
        ['Connection', connectionCell(r.connection, 'runner-detail-connection')],
        ['Runner key', mono(r.runnerKey)],
        ['Identity model', r.identityModel === 'keypair' ? 'key pair (self-enrolled)' : 'bootstrap token (registered by an admin)'],
        ['Capacity', h('span', { testid: 'runner-detail-capacity' }, `${r.activeClaims ?? 0} / ${r.maxConcurrentJobs ?? '—'} jobs`)],
        ['Completed jobs', h('span', { testid: 'runner-completed' }, String(r.completedJobs ?? 0))],
        ['Product', [r.product, r.version].filter(Boolean).join(' ') || null],
        ['Address', r.address ? mono(r.address) : null],
        ['Tags', chips(r.tags)],
        ['Registered', timeAgo(r.registeredAt)],
        ['Approved', timeAgo(r.approvedAt)],
        ['Revoked', r.revokedAt ? timeAgo(r.revokedAt) : null],
        ['Last heartbeat', timeAgo(r.lastHeartbeatAt, 'runner-detail-heartbeat')],
        ['Last seen', timeAgo(r.lastSeenAt, 'runner-detail-last-seen')],
      ]), { testid: 'runner-overview' }),
      card('Identity', facts([
        ['Fingerprint', r.fingerprint ? h('code.mono.wrap', { testid: 'runner-fingerprint' }, r.fingerprint) : null],
        ['Key id', mono(r.keyId)],
        r.identityModel === 'keypair' ? null : ['Bootstrap token expires', timeAgo(r.bootstrapTokenExpiresAt, 'runner-token-expires')],
        ['Public key', r.publicKey ? h('code.mono.wrap', r.publicKey) : null],
      ]), { testid: 'runner-identity-card' }),
      card('Capabilities', capabilitiesView(r), { testid: 'runner-capabilities-card' }),
      card('Isolation on its host', isolationView(r, iso), { testid: 'runner-isolation-card' }),
      card('Machine', machineView(r.machine), { testid: 'runner-machine-card' }),
      card('Claims', cl?.error ? errorBox(cl.error) : claimsView(base, claims), { testid: 'runner-claims-card' }),
      card('Uploaded files', filesView(r), { testid: 'runner-files-card' }),
      card('Audit events', ev?.error ? errorBox(ev.error) : eventsView(base, events), { testid: 'runner-events-card' })));
  }

  function actionButton(action) {
    const tone = action === 'revoke' ? '.btn-danger' : action === 'approve' ? '.btn-primary' : '';
    return h(`button.btn${tone}`, {
      type: 'button', testid: `action-${action}`,
      on: { click: () => openAction(action) },
    }, ACTION_LABELS[action]);
  }

  const afterChange = () => {
    lastSig = '';
    return load();
  };

  function openAction(action) {
    if (!runner) return;
    const r = runner;
    const path = `/api/remote-runners/${enc(r.id)}`;
    if (action === 'approve') {
      const keypair = r.identityModel === 'keypair';
      const input = h('input#approve-fp', { type: 'text', testid: 'approve-fingerprint', autocomplete: 'off', spellcheck: false, placeholder: 'SHA256:…' });
      const match = h('div.match', { 'aria-live': 'polite', testid: 'approve-match' });
      const fpOk = () => !keypair || input.value.trim() === r.fingerprint;
      input.addEventListener('input', () => {
        const text = input.value.trim();
        if (!text) match.textContent = '';
        else if (fpOk()) { match.textContent = '✓ matches the runner\'s fingerprint'; match.className = 'match match-ok'; }
        else { match.textContent = '✗ does not match the runner\'s fingerprint'; match.className = 'match match-bad'; }
      });
      reasonDialog({
        title: `Approve ${r.name || r.id}`,
        testid: 'approve-dialog',
        intro: keypair
          ? 'Paste or type the fingerprint the runner printed on its machine (not the one shown on this page). Approve is enabled only when it equals the fingerprint this runner enrolled with.'
          : 'The runner becomes active and can claim jobs.',
        extra: keypair ? [
          h('div.field', h('label', { htmlFor: 'approve-fp' }, 'Fingerprint the runner printed'), input, match),
        ] : [],
        ready: fpOk,
        confirmLabel: 'Approve',
        submit: (reason) => patch(path, keypair
          ? { status: 'active', reason, fingerprint: input.value.trim() }
          : { status: 'active', reason }),
        onDone: afterChange,
      });
      if (keypair) input.focus();
    } else if (action === 'drain') {
      reasonDialog({
        title: `Drain ${r.name || r.id}`,
        testid: 'drain-dialog',
        intro: 'The runner finishes the jobs it holds and claims no new ones until it is activated again.',
        confirmLabel: 'Drain',
        submit: (reason) => patch(path, { status: 'draining', reason }),
        onDone: afterChange,
      });
    } else if (action === 'activate') {
      reasonDialog({
        title: `Activate ${r.name || r.id}`,
        testid: 'activate-dialog',
        intro: 'The runner may claim jobs again.',
        confirmLabel: 'Activate',
        submit: (reason) => patch(path, { status: 'active', reason }),
        onDone: afterChange,
      });
    } else if (action === 'revoke') {
      const typed = h('input#revoke-name', { type: 'text', testid: 'revoke-name', autocomplete: 'off', spellcheck: false });
      const tick = h('input#revoke-understand', { type: 'checkbox', testid: 'revoke-understand' });
      reasonDialog({
        title: `Revoke ${r.name || r.id}`,
        testid: 'revoke-dialog',
        danger: true,
        intro: 'Revoking is permanent: every credential of this runner stops working at once and it can never be activated again. A replacement needs a new identity.',
        extra: [
          h('div.field', h('label', { htmlFor: 'revoke-name' }, 'Type the runner name to confirm: ', h('code', r.name || r.id)), typed),
          h('label.check', { htmlFor: 'revoke-understand' }, tick, ' Or tick: I understand this is permanent'),
        ],
        ready: () => tick.checked || typed.value === (r.name || r.id),
        confirmLabel: 'Revoke permanently',
        submit: (reason) => patch(path, { status: 'revoked', reason }),
        onDone: afterChange,
      });
    } else if (action === 'rotate') {
      reasonDialog({
        title: `Rotate the bootstrap token of ${r.name || r.id}`,
        testid: 'rotate-dialog',
        intro: 'A new bootstrap token is issued and shown once. The old token and every credential made from it stop working at once: update the runner\'s secret before it next exchanges a session.',
        confirmLabel: 'Rotate',
        submit: (reason) => post(`${path}/rotate`, { reason }),
        onDone: (answer) => {
          tokenDialog({ title: 'New bootstrap token', runner: answer.runner || r, token: answer.bootstrapToken });
          afterChange();
        },
      });
    }
  }

  load();
  const stop = poller(load, POLL_MS);
  return {
    el,
    destroy() {
      destroyed = true;
      stop();
    },
  };
}
