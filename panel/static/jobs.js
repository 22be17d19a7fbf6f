// The Jobs tab: the list with counts, and a job's page (subject, claims, transitions, stream
// custody recomputed here, the followed log, completions, evidence, cancel, bundle download).

import { get, post, del, getBlob, query, enc } from './api.js';
import {
  h, replace, clear, timeAgo, badge, mono, hash, facts, card, emptyState, richText, errorBox,
  jsonText, formatBytes, formatSeconds, formatMb, table, row, keepFocus, poller, chips, yesNo,
  pager, syncRows,
} from './dom.js';
import { reasonDialog } from './dialog.js';
import { verifyChain } from './chain.js';
import { payloadLines } from './logs.js';
import { runnerHref } from './runners.js';

const PAGE_SIZE = 50;
const LIST_POLL_MS = 5000;
const JOB_POLL_MS = 3000;
const LOG_POLL_MS = 2000;
// The log keeps its newest lines in the page: a 64 MiB stream would otherwise become hundreds
// of thousands of nodes. The CLI (`edgerunner admin jobs logs`) and the bundle hold every line.
export const MAX_LOG_LINES = 10000;

// The state filter's choices and the order of the counts are the API's (`states` of the list),
// as are whether a job is finished and what may be done to it (`terminal`, `actions`).

function jobHref(base, id) {
  return `${base}/jobs/${enc(id)}`;
}

/** What a job runs, named as an operator knows it: kind, the artifact's name and version. */
function subjectText(subject) {
  if (!subject) return h('span.muted', '—');
  return h('span.subject', { testid: 'job-ran' },
    h('span.chip', subject.kind || '?'),
    subject.artifactName
      ? h('span.strong', { title: subject.artifactId, testid: 'job-artifact-name' }, subject.artifactName)
      : h('code.mono', { title: subject.artifactId }, subject.artifactId || '—'),
    h('span', { title: 'exact version', testid: 'job-version' }, ` v${subject.versionId ?? '—'}`),
    h('span.muted', ' → '),
    h('span', subject.environment || '—'));
}

// ------------------------------------------------------------------------------------------
// The list
// ------------------------------------------------------------------------------------------

const LIST_COLUMNS = ['Job', 'State', 'Ran', 'Attempt', 'Created', 'Updated', 'Finished'];

/** A held job's mark: retention keeps it until an admin releases it. */
function heldMark(hold, testid = 'job-held') {
  return h('span.held', { testid, title: `held by ${hold.heldBy}: ${hold.reason || ''}` }, 'held');
}

function jobRow(base, job) {
  return row([
    h('a.mono', { href: jobHref(base, job.id), testid: 'job-link', dataset: { key: job.id }, title: job.id }, job.id),
    h('span.state-cell', badge(job.state, 'job-state'), job.hold ? heldMark(job.hold) : null),
    subjectText(job.subject),
    String(job.dispatchAttempt ?? 0),
    timeAgo(job.createdAt),
    timeAgo(job.updatedAt),
    timeAgo(job.finishedAt),
  ], { testid: 'job-row', dataset: { jobId: job.id, sig: JSON.stringify(job) } }, LIST_COLUMNS);
}

export function jobsView(ctx) {
  const { base } = ctx;
  let destroyed = false;
  let stateFilter = new URLSearchParams(location.search).get('state') || '';

  const counts = h('div.counts', { testid: 'job-counts' });
  const stateOption = (s) => h('option', { value: s, selected: s === stateFilter }, s.replace(/_/g, ' '));
  // Until the first answer names the states, the filter offers the one the address asks for.
  const select = h('select#job-state-filter', { testid: 'job-state-filter' },
    h('option', { value: '' }, 'All states'),
    stateFilter ? stateOption(stateFilter) : null);
  let knownStates = null;
  function renderStates(states) {
    if (!Array.isArray(states) || JSON.stringify(states) === JSON.stringify(knownStates)) return;
    knownStates = states;
    replace(select, h('option', { value: '' }, 'All states'), states.map(stateOption));
    select.value = stateFilter;
  }
  const tbody = h('tbody', { testid: 'jobs-body' });
  const tableEl = table(LIST_COLUMNS, tbody, 'jobs-table');
  const status = h('div.status-area', { 'aria-live': 'polite' });
  const empty = h('div');
  const paging = pager('jobs', () => {
    clear(tbody);
    return load();
  });

  const el = h('div.view.view-jobs', { testid: 'jobs-view' },
    h('div.page-head',
      h('h1', 'Jobs'),
      h('div.page-actions.filter',
        h('label', { htmlFor: 'job-state-filter' }, 'State'), select)),
    counts,
    status,
    empty,
    tableEl,
    paging.el);

  function renderCounts(c, states) {
    if (!c) {
      clear(counts);
      return;
    }
    const big = ['queued', 'running'];
    const small = (states || Object.keys(c)).filter((s) => !big.includes(s));
    replace(counts,
      big.map((s) => h('div.count-big', { testid: `count-${s}` },
        h('span.count-n', String(c[s] ?? 0)), h('span.count-label', s))),
      h('div.count-small',
        small.map((s) => h('span.count-pill', { testid: `count-${s}` },
          badge(s), ' ', h('strong', String(c[s] ?? 0))))));
  }

  async function load({ quiet = false } = {}) {
    let data;
    try {
      data = await get(`/api/remote-runners/jobs${query({ limit: PAGE_SIZE, state: stateFilter, cursor: paging.cursor() })}`);
    } catch (error) {
      if (!destroyed) replace(status, errorBox(error));
      if (!quiet) throw error;
      return;
    }
    if (destroyed) return;
    clear(status);
    renderStates(data.states);
    renderCounts(data.counts, data.states);
    const jobs = data.jobs || [];
    if (jobs.length === 0 && paging.onFirstPage()) {
      tableEl.hidden = true;
      replace(empty, emptyState(richText(stateFilter
        ? `No ${stateFilter.replace(/_/g, ' ')} jobs. Choose another state, or All states.`
        : 'No jobs yet. Enqueue one with `edgerunner admin jobs enqueue` or `POST /api/remote-runners/jobs`.')));
    } else {
      tableEl.hidden = false;
      clear(empty);
      syncRows(tbody, jobs, (job) => job.id, (job) => jobRow(base, job));
    }
    paging.update(data.nextCursor);
  }

  select.addEventListener('change', () => {
    stateFilter = select.value;
    paging.reset();
    const url = stateFilter ? `${base}/jobs?state=${enc(stateFilter)}` : `${base}/jobs`;
    history.replaceState(null, '', url);
    clear(tbody);
    load().catch(() => {});
  });

  document.title = 'Jobs · edgerunner';
  load().catch(() => {});
  const stop = poller(() => load({ quiet: true }), LIST_POLL_MS);
  return {
    el,
    destroy() {
      destroyed = true;
      stop();
    },
  };
}

// ------------------------------------------------------------------------------------------
// A job's page
// ------------------------------------------------------------------------------------------

function requirementsView(req) {
  if (!req || typeof req !== 'object') return h('p.muted', 'No requirements.');
  const limits = req.limits || {};
  const network = req.network;
  let networkText = null;
  if (network === undefined || network === null || network === 'deny_all' || network?.mode === 'deny_all') networkText = h('code', 'deny_all');
  else if (network.mode === 'allowlist') networkText = h('span', h('code', 'allowlist'), ' ', chips(network.origins));
  else networkText = h('code', jsonText(network));
  const known = new Set(['executionKind', 'runtime', 'limits', 'network', 'streaming', 'cancellation', 'problemType', 'external', 'tags']);
  const extra = Object.entries(req).filter(([k]) => !known.has(k));
  return facts([
    ['Execution kind', req.executionKind ? h('span.chip', req.executionKind) : null],
    ['Runtime', req.runtime ? h('code', req.runtime) : null],
    ['CPU', formatSeconds(limits.cpuSeconds)],
    ['Memory', formatMb(limits.memoryMb)],
    ['Wall time', formatSeconds(limits.wallSeconds)],
    ['Output', limits.outputBytes === undefined ? null : `${formatBytes(limits.outputBytes)} (${limits.outputBytes} bytes)`],
    ['Network', networkText],
    ['Streaming required', yesNo(req.streaming ?? false)],
    ['Cancellation required', yesNo(req.cancellation ?? false)],
    ['Problem type', req.problemType ?? null],
    ['External', yesNo(req.external ?? false)],
    ['Tags', chips(req.tags, 'default')],
    ...extra.map(([k, v]) => [k, h('code.json-inline', jsonText(v))]),
  ], 'job-requirements');
}

function claimsTable(base, claims) {
  if (!claims.length) return h('p.muted', { testid: 'job-no-claims' }, 'Not claimed yet: no runner has taken this job. A compatible active runner with free capacity claims it.');
  const labels = ['Attempt', 'Runner', 'Claim', 'State', 'Key id', 'Issued', 'Started', 'Lease expires', 'Ended', 'End reason'];
  return table(labels, h('tbody', claims.map((c) => row([
    String(c.dispatchAttempt),
    h('a.mono', { href: runnerHref(base, c.runnerId), testid: 'claim-runner', title: c.runnerId }, c.runnerId),
    mono(c.id, { short: 16, testid: 'claim-id' }),
    badge(c.state),
    mono(c.keyId),
    timeAgo(c.issuedAt),
    timeAgo(c.startedAt),
    c.held ? timeAgo(c.leaseExpiresAt) : h('span.muted', { title: c.leaseExpiresAt || '' }, '—'),
    timeAgo(c.endedAt),
    c.endReason ? h('span', c.endReason) : h('span.muted', '—'),
  ], { testid: 'job-claim', dataset: { state: c.state } }, labels))), 'job-claims');
}

function eventsTable(base, events) {
  if (!events.length) return h('p.muted', 'No transitions recorded.');
  const labels = ['#', 'Event', 'Actor', 'Attempt', 'Reason', 'Time', 'Detail'];
  return table(labels, h('tbody', events.map((e, i) => row([
    String(i + 1),
    h('code.event-type', { testid: 'event-type' }, e.type),
    e.actor ? h('span.actor', e.actor) : h('span.muted', '—'),
    e.attempt === null || e.attempt === undefined ? h('span.muted', '—') : String(e.attempt),
    e.reason ? h('span.event-reason', { testid: 'event-reason' }, e.reason) : h('span.muted', '—'),
    h('span.nowrap', timeAgo(e.at)),
    e.detail && (typeof e.detail !== 'object' || Object.keys(e.detail).length)
      ? h('code.json-inline', { title: jsonText(e.detail) }, JSON.stringify(e.detail))
      : h('span.muted', '—'),
  ], { testid: 'job-event', dataset: { type: e.type } }, labels))), 'job-events');
}

async function custodyView(job) {
  const stream = job.stream || [];
  if (!stream.length) {
    return h('p.muted', { testid: 'custody-empty' }, job.terminal
      ? 'This job has no stream: no chunk was ever accepted.'
      : 'No chunks yet. They appear here as the runner streams.');
  }
  const verified = await verifyChain(stream, job.id, job.claims || []);
  const labels = ['Seq', 'Kind', 'Previous checksum', 'Checksum', 'Payload hash', 'Emitted', 'Received', 'Link'];
  const parts = [];
  let allHold = true;
  for (const [attempt, rows] of verified) {
    const holding = rows.filter((r) => r.holds).length;
    if (holding !== rows.length) allHold = false;
    const claim = (job.claims || []).find((c) => c.dispatchAttempt === attempt);
    parts.push(h('div.attempt', { testid: 'custody-attempt', dataset: { attempt: String(attempt) } },
      h('h3.sub', `Attempt ${attempt}`, claim ? h('span.muted', ` · claim ${claim.id}`) : null,
        h(`span.chain-summary${holding === rows.length ? '.ok' : '.bad'}`, { testid: 'chain-summary' },
          ` ${rows.length} chunk${rows.length === 1 ? '' : 's'}, ${holding === rows.length ? `all ${holding} links hold` : `${rows.length - holding} broken`}`)),
      table(labels, h('tbody', rows.map(({ chunk, holds, problems, computed }) => row([
        String(chunk.sequence),
        h('span.chip', chunk.kind),
        hash(chunk.previousChecksum),
        hash(chunk.checksum),
        hash(chunk.payloadHash),
        timeAgo(chunk.emittedAt),
        timeAgo(chunk.receivedAt),
        holds
          ? h('span.link-ok', { testid: 'link-ok', title: `previous link and checksum recomputed in this page: ${computed}` }, '✓ holds')
          : h('span.link-bad', { testid: 'link-broken', title: problems.join('; ') }, '✗ broken', h('span.link-why', problems.join('; '))),
      ], { testid: 'custody-chunk', dataset: { sequence: String(chunk.sequence), holds: String(holds) } }, labels))), 'custody-table')));
  }
  return h('div',
    h('p.help', 'Each link is recomputed in this page: sequence 0 has no previous checksum, every other chunk names its predecessor\'s checksum, and checksum = SHA-256 of the stable JSON of {claimId, dispatchAttempt, emittedAt, jobId, kind, payloadHash, previousChecksum, sequence}.'),
    h(`div.custody-verdict${allHold ? '.ok' : '.bad'}`, { testid: 'custody-verdict' },
      allHold ? `✓ All ${stream.length} links hold.` : '✗ At least one link is broken.'),
    parts);
}

function completionsView(base, job) {
  const completions = job.completions || [];
  if (!completions.length) return h('p.muted', { testid: 'no-completions' }, job.terminal ? 'No completion was reported.' : 'No completion yet.');
  const lastChecksum = new Map();
  for (const c of job.stream || []) {
    const prev = lastChecksum.get(c.dispatchAttempt);
    if (!prev || prev.sequence < c.sequence) lastChecksum.set(c.dispatchAttempt, c);
  }
  return h('div.completions', completions.map((c) => {
    const tail = lastChecksum.get(c.dispatchAttempt);
    const ev = c.evidence || {};
    return h('article.completion', { testid: 'completion', dataset: { decision: c.decision, completionId: c.id } },
      h('div.completion-head',
        badge(c.decision, 'completion-decision'), ' ',
        mono(c.id, { testid: 'completion-id' }),
        h('span.muted', ` · attempt ${c.dispatchAttempt} · status `), badge(c.status, 'completion-status')),
      c.rationale ? h('p.rationale', { testid: 'completion-rationale' }, c.rationale) : null,
      facts([
        ['Runner', c.runnerId ? h('a.mono', { href: runnerHref(base, c.runnerId) }, c.runnerId) : null],
        ['Claim', mono(c.claimId)],
        ['Completion checksum', hash(c.completionChecksum)],
        ['Input hash', h('span', hash(c.inputHash), c.inputHash && c.inputHash === job.inputHash ? h('span.ok-mark', { title: 'equals the job\'s input hash' }, ' ✓') : null)],
        ['Result hash', hash(c.resultHash, 'completion-result-hash')],
        ['Final stream checksum', h('span', hash(c.finalStreamChecksum), tail && tail.checksum === c.finalStreamChecksum ? h('span.ok-mark', { title: 'equals the last chunk of this attempt' }, ' ✓') : null)],
        ['Evidence', [
          ev.evaluationRunId ? h('div', 'run ', mono(ev.evaluationRunId)) : null,
          ev.testResultIds?.length ? h('div', `${ev.testResultIds.length} test result(s)`) : null,
          ev.costRecordIds?.length ? h('div', `${ev.costRecordIds.length} cost record(s)`) : null,
          ev.modelCallIds?.length ? h('div', `${ev.modelCallIds.length} model call(s)`) : null,
          ev.traceId ? h('div', 'trace ', mono(ev.traceId)) : null,
        ].filter(Boolean)],
        ['Reported costs', c.reportedCosts && (typeof c.reportedCosts !== 'object' || Object.keys(c.reportedCosts).length)
          ? h('code.json-inline', { title: jsonText(c.reportedCosts) }, JSON.stringify(c.reportedCosts))
          : null],
        ['Completed', timeAgo(c.completedAt)],
        ['Received', timeAgo(c.receivedAt)],
      ]));
  }));
}

function custodyText(attachedTo) {
  if (!attachedTo) return h('span.muted', { testid: 'custody' }, 'not attached');
  return h('span.custody', { testid: 'custody', title: attachedTo.attachedAt ? `attached ${attachedTo.attachedAt}` : '' },
    'custody: completion ', h('code', attachedTo.completionId), ' (job ', h('code', attachedTo.jobId), ')');
}

function evidenceRunView(run) {
  const section = (title, rows, labels, cells, testid) => (rows?.length
    ? [h('h3.sub', `${title} (${rows.length})`), table(labels, h('tbody', rows.map((r) => row(cells(r), { testid }, labels))))]
    : [h('h3.sub', title), h('p.muted', 'None.')]);
  return h('div.evidence-run', { testid: 'evidence-run' },
    facts([
      ['Run', mono(run.id, { testid: 'evidence-run-id' })],
      ['Name', run.name ?? null],
      ['Evaluation', run.evaluationId ?? null],
      ['Status', run.status ? badge(run.status) : null],
      ['Created', timeAgo(run.createdAt)],
      ['Finished', timeAgo(run.finishedAt)],
      ['Metadata', run.metadata && Object.keys(run.metadata).length ? h('code.json-inline', { title: jsonText(run.metadata) }, JSON.stringify(run.metadata)) : null],
      ['Custody', custodyText(run.attachedTo)],
    ]),
    section('Test results', run.testResults, ['Id', 'Name', 'Result', 'Score', 'Created', 'Custody'], (t) => [
      mono(t.id), h('span', { testid: 'test-result-name' }, t.name ?? '—'),
      badge(t.status || (t.passed ? 'passed' : 'failed')),
      t.score === null || t.score === undefined ? h('span.muted', '—') : String(t.score),
      timeAgo(t.createdAt), custodyText(t.attachedTo)], 'evidence-test-result'),
    section('Cost records', run.costRecords, ['Id', 'Category', 'Amount', 'Provider', 'Custody'], (c) => [
      mono(c.id), c.category ?? '—',
      `${((c.amountMicros ?? 0) / 1e6).toFixed(6)} ${c.currency || ''}`.trim(),
      c.provider ?? '—', custodyText(c.attachedTo)], 'evidence-cost'),
    section('Model calls', run.modelCalls, ['Id', 'Provider', 'Model', 'Status', 'Tokens in/out', 'Latency', 'Custody'], (m) => [
      mono(m.id), m.provider ?? '—', m.model ?? '—', m.status ? badge(m.status) : '—',
      `${m.inputTokens ?? '—'} / ${m.outputTokens ?? '—'}`,
      m.latencyMs === null || m.latencyMs === undefined ? '—' : `${m.latencyMs} ms`, custodyText(m.attachedTo)], 'evidence-model-call'),
    section('Traces', run.traces, ['Id', 'Name', 'Spans', 'Custody'], (t) => [
      mono(t.id), t.name ?? '—', String(Array.isArray(t.spans) ? t.spans.length : 0), custodyText(t.attachedTo)], 'evidence-trace'));
}

// The log: chunks read from the stream endpoint, grouped by attempt.

/** One line for a runner event chunk: `started: cmd`, `exited: exitCode=0 · 12 ms`, or key=value. */
function eventSummary(payload) {
  const { event: name, ...rest } = payload;
  const parts = [];
  if (name === 'started' && typeof rest.command === 'string') {
    parts.push(rest.command);
    delete rest.command;
  }
  if (name === 'exited') {
    for (const key of ['exitCode', 'signal', 'killed', 'ending']) {
      if (rest[key] !== undefined && rest[key] !== null && rest[key] !== false && !(key === 'ending' && rest[key] === 'exited')) {
        parts.push(`${key}=${typeof rest[key] === 'string' ? rest[key] : JSON.stringify(rest[key])}`);
      }
    }
    if (typeof rest.durationMs === 'number') parts.push(`${rest.durationMs} ms`);
    if (typeof rest.stdoutBytes === 'number') parts.push(`stdout ${rest.stdoutBytes} B`);
    if (typeof rest.stderrBytes === 'number') parts.push(`stderr ${rest.stderrBytes} B`);
    if (rest.linesOverLimit) parts.push(`${rest.linesOverLimit} lines over the output limit`);
    if (rest.cancelReason) parts.push(`cancel reason: ${rest.cancelReason}`);
    return `${name}: ${parts.join(' · ')}`;
  }
  for (const [key, value] of Object.entries(rest)) {
    if (value === null || value === undefined) continue;
    parts.push(`${key}=${typeof value === 'string' ? value : JSON.stringify(value)}`);
  }
  return parts.length ? `${name}: ${parts.join(' · ')}` : name;
}
function logLineNodes(chunk) {
  const payload = chunk.payload;
  const nodes = [];
  const event = (text, title) => nodes.push(h('div.log-line.log-event', { testid: 'log-event', title },
    h('span.log-mark', { 'aria-hidden': 'true' }, '•'), h('span.log-text', text)));
  if (chunk.kind === 'log' && payload && typeof payload === 'object' && !Array.isArray(payload)) {
    const lines = payloadLines(payload);
    if (lines) {
      for (const line of lines) {
        const stderr = line.stream === 'stderr';
        nodes.push(h(`div.log-line${stderr ? '.log-stderr' : '.log-stdout'}`, { testid: 'log-line', dataset: { stream: stderr ? 'stderr' : 'stdout' } },
          h('span.log-mark', { 'aria-label': stderr ? 'stderr' : 'stdout' }, stderr ? 'stderr' : ''),
          h('span.log-text', line.line),
          line.truncated ? h('span.log-trunc', ' [truncated]') : null));
      }
      return nodes;
    }
    if (typeof payload.event === 'string') {
      event(eventSummary(payload), JSON.stringify(payload));
      return nodes;
    }
    if (typeof payload.message === 'string') {
      nodes.push(h('div.log-line.log-message', { testid: 'log-line', dataset: { stream: 'message' } }, h('span.log-mark', ''), h('span.log-text', payload.message)));
      return nodes;
    }
  }
  if (chunk.kind === 'trajectory') {
    event(`trajectory ${JSON.stringify(payload)}`);
    return nodes;
  }
  nodes.push(h('div.log-line', { testid: 'log-line', dataset: { stream: 'other' } }, h('span.log-mark', chunk.kind || ''), h('span.log-text', JSON.stringify(payload))));
  return nodes;
}

export function jobView(ctx, id) {
  const { session, base } = ctx;
  let destroyed = false;
  let job = null;
  const sigs = {};

  const title = h('h1.title-text.mono', { testid: 'job-title' }, id);
  const stateSlot = h('span');
  const subtitle = h('div.subtitle');
  const actions = h('div.page-actions', { testid: 'job-actions' });
  const status = h('div.status-area', { 'aria-live': 'polite' });

  const bodies = {
    subject: h('div'), requirements: h('div'), claims: h('div'), events: h('div'),
    custody: h('div'), completions: h('div'),
  };
  const logBox = h('div.log', { testid: 'job-log', tabIndex: 0, role: 'log', 'aria-label': 'Job output' },
    h('div.muted.log-empty', 'No output yet.'));
  const logStatus = h('span.muted', { testid: 'log-status' });
  // Shown once the log has more lines than the page keeps (MAX_LOG_LINES).
  const logNotice = h('p.log-notice', { testid: 'log-notice', hidden: true });
  const evidenceList = h('div');
  const evidenceOut = h('div', { 'aria-live': 'polite' });
  const evidenceButton = h('button.btn', { type: 'button', testid: 'evidence-button', hidden: true }, 'Show evidence run');

  const el = h('div.view.view-job', { testid: 'job-view' },
    h('nav.crumbs', { 'aria-label': 'Breadcrumb' }, h('a', { href: `${base}/jobs` }, 'Jobs'), ' / ', h('span.mono', id)),
    h('div.page-head', h('div', h('div.title-row', title, stateSlot), subtitle), actions),
    status,
    h('div.cards.cards-2',
      card('Subject', bodies.subject, { testid: 'job-subject' }),
      card('Requirements', bodies.requirements, { testid: 'job-requirements-card' })),
    h('div.cards',
      card('Claims', bodies.claims, { testid: 'job-claims-card' }),
      card('State transitions', bodies.events, { testid: 'job-events-card' }),
      card('Log', h('div', logNotice, logBox), { testid: 'job-log-card', actions: logStatus }),
      card('Stream custody', bodies.custody, { testid: 'job-custody-card' }),
      card('Completions', bodies.completions, { testid: 'job-completions-card' }),
      card('Evidence', h('div', evidenceList, evidenceButton, evidenceOut), { testid: 'job-evidence-card' })));

  async function update(key, data, render) {
    const sig = JSON.stringify(data);
    if (sigs[key] === sig) return;
    const node = await render();
    if (destroyed) return;
    sigs[key] = sig;
    keepFocus(bodies[key], () => replace(bodies[key], node));
  }

  function renderHead(j) {
    document.title = `${j.id} · Jobs · edgerunner`;
    replace(stateSlot, badge(j.state, 'job-detail-state'), j.hold ? heldMark(j.hold, 'job-detail-held') : null);
    replace(subtitle,
      subjectText(j.subject),
      ' · attempt ', h('span', { testid: 'job-attempt' }, String(j.dispatchAttempt ?? 0)),
      ' · created ', timeAgo(j.createdAt),
      j.finishedAt ? [' · finished ', timeAgo(j.finishedAt)] : null);
    const offered = j.actions || [];
    const canCancel = session.canCancel && offered.includes('cancel');
    const canHold = session.canAdmin && offered.includes('hold');
    const canRelease = session.canAdmin && offered.includes('release');
    const sig = `${canCancel}|${canHold}|${canRelease}`;
    if (actions.dataset.sig !== sig) {
      actions.dataset.sig = sig;
      keepFocus(actions, () => replace(actions,
        canCancel ? h('button.btn.btn-danger', { type: 'button', testid: 'action-cancel', on: { click: openCancel } }, 'Cancel job') : null,
        canHold ? h('button.btn', { type: 'button', testid: 'action-hold', on: { click: openHold } }, 'Hold') : null,
        canRelease ? h('button.btn', { type: 'button', testid: 'action-release', on: { click: releaseHold } }, 'Release hold') : null,
        h('button.btn', { type: 'button', testid: 'download-bundle', on: { click: downloadBundle } }, 'Download custody bundle')));
    }
  }

  async function load() {
    let j;
    try {
      j = await get(`/api/remote-runners/jobs/${enc(id)}`);
    } catch (error) {
      if (!destroyed) replace(status, errorBox(error));
      return;
    }
    if (destroyed) return;
    clear(status);
    job = j;
    renderHead(j);
    await Promise.all([
      update('subject', [j.subject, j.inputHash, j.idempotencyKey, j.state, j.terminal, j.cancelReason, j.leaseExpiresAt, j.activeClaimId, j.updatedAt, j.hold], () => facts([
        ['Kind', j.subject?.kind ? h('span.chip', j.subject.kind) : null],
        ['Artifact', h('span', j.subject?.artifactName ? h('span.strong', { testid: 'subject-artifact-name' }, j.subject.artifactName) : null,
          j.subject?.artifactName ? ' ' : null, mono(j.subject?.artifactId, { testid: 'subject-artifact' }))],
        ['Exact version', h('span', { testid: 'subject-version' }, String(j.subject?.versionId ?? '—'))],
        ['Content hash', hash(j.subject?.contentHash, 'subject-content-hash')],
        ['Environment', j.subject?.environment ?? null],
        ['Input hash', hash(j.inputHash, 'job-input-hash')],
        ['Idempotency key', mono(j.idempotencyKey)],
        ['Active claim', mono(j.activeClaimId)],
        ['Lease expires', j.leaseExpiresAt && !j.terminal ? timeAgo(j.leaseExpiresAt) : null],
        ['Cancel reason', j.cancelReason ? h('span', { testid: 'job-cancel-reason' }, j.cancelReason) : null],
        j.hold ? ['Held', h('span', { testid: 'job-hold' }, 'since ', timeAgo(j.hold.heldAt), ` by ${j.hold.heldBy}: `,
          h('span', { testid: 'job-hold-reason' }, j.hold.reason || '—'))] : null,
        ['Updated', timeAgo(j.updatedAt)],
      ], 'job-subject-facts')),
      update('requirements', j.requirements, () => requirementsView(j.requirements)),
      update('claims', j.claims, () => claimsTable(base, j.claims || [])),
      update('events', j.events, () => eventsTable(base, j.events || [])),
      update('custody', [j.stream, j.claims?.map((c) => c.id), j.state, j.terminal], () => custodyView(j)),
      update('completions', [j.completions, j.stream?.length, j.terminal], () => completionsView(base, j)),
    ]);
    renderEvidenceList(j);
  }

  function renderEvidenceList(j) {
    const completions = j.completions || [];
    const accepted = completions.find((c) => c.decision === 'accepted');
    const chosen = accepted || completions[completions.length - 1];
    const runId = chosen?.evidence?.evaluationRunId || null;
    const sig = JSON.stringify([j.evidence, runId]);
    if (evidenceList.dataset.sig === sig) return;
    evidenceList.dataset.sig = sig;
    const rows = j.evidence || [];
    const labels = ['Kind', 'Id', 'Completion'];
    replace(evidenceList,
      rows.length
        ? table(labels, h('tbody', rows.map((e) => row([e.kind, mono(e.id), mono(e.completionId)], { testid: 'job-evidence-row' }, labels))), 'job-evidence')
        : h('p.muted', completions.length ? 'The completion attached no evidence rows.' : 'Evidence appears once a completion is accepted.'),
      runId ? h('p.help', `Evaluation run named by the ${accepted ? 'accepted' : 'latest'} completion: `, h('code', runId)) : null);
    evidenceButton.hidden = !runId;
    evidenceButton.dataset.runId = runId || '';
  }

  evidenceButton.addEventListener('click', async () => {
    const runId = evidenceButton.dataset.runId;
    if (!runId) return;
    evidenceButton.disabled = true;
    replace(evidenceOut, h('p.muted', 'Loading the evaluation run…'));
    try {
      const run = await get(`/api/evidence/runs/${enc(runId)}`);
      replace(evidenceOut, evidenceRunView(run));
    } catch (error) {
      replace(evidenceOut, errorBox(error));
    } finally {
      evidenceButton.disabled = false;
    }
  });

  function openCancel() {
    reasonDialog({
      title: 'Cancel job',
      testid: 'cancel-dialog',
      intro: 'A queued job is cancelled at once; a claimed or running job is asked to stop and the runner sees it on its next heartbeat.',
      confirmLabel: 'Cancel job',
      danger: true,
      submit: (reason) => post(`/api/remote-runners/jobs/${enc(id)}/cancel`, { reason }),
      onDone: () => {
        load();
        startFollowing();
      },
    });
  }

  function openHold() {
    reasonDialog({
      title: 'Hold job',
      testid: 'hold-dialog',
      intro: 'A held job is kept past the organization\'s retention (for an audit, an incident) until an admin releases it.',
      confirmLabel: 'Hold job',
      submit: (reason) => post(`/api/remote-runners/jobs/${enc(id)}/hold`, { reason }),
      onDone: () => load(),
    });
  }

  async function releaseHold(event) {
    const button = event.currentTarget;
    button.disabled = true;
    try {
      await del(`/api/remote-runners/jobs/${enc(id)}/hold`);
      await load();
    } catch (error) {
      replace(status, errorBox(error));
      button.disabled = false;
    }
  }

  async function downloadBundle(event) {
    const button = event.currentTarget;
    button.disabled = true;
    try {
      const blob = await getBlob(`/api/remote-runners/jobs/${enc(id)}/bundle`);
      const url = URL.createObjectURL(blob);
      const a = h('a.hidden', { href: url, download: `bundle-${id}.json` });
      document.body.appendChild(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60000);
    } catch (error) {
      replace(status, errorBox(error));
    } finally {
      button.disabled = false;
    }
  }

  // ---- the log ------------------------------------------------------------------------
  let logCursor = null;
  let logDone = false;
  const seen = new Set();
  const groups = new Map();
  let shownLines = 0;
  let hiddenLines = 0;

  // Drops the oldest lines past MAX_LOG_LINES and says how many are not shown.
  function trimLog() {
    const excess = shownLines - MAX_LOG_LINES;
    if (excess > 0) {
      const all = logBox.querySelectorAll('.log-line');
      for (let i = 0; i < excess && i < all.length; i += 1) all[i].remove();
      shownLines -= excess;
      hiddenLines += excess;
    }
    if (!hiddenLines) return;
    logNotice.hidden = false;
    const count = (n) => n.toLocaleString('en-US');
    logNotice.textContent = `${count(hiddenLines)} earlier line(s) are not shown: this page keeps the last ${count(MAX_LOG_LINES)}. `
      + `\`edgerunner admin jobs logs ${id}\` prints them all, and the custody bundle holds them.`;
  }

  function groupFor(attempt) {
    if (groups.has(attempt)) return groups.get(attempt);
    const lines = h('div.log-lines');
    const group = h('section.log-attempt', { testid: 'log-attempt', dataset: { attempt: String(attempt) } },
      h('div.log-attempt-head', `Attempt ${attempt}`), lines);
    const after = [...groups.keys()].filter((a) => a > attempt).sort((a, b) => a - b)[0];
    const empty = logBox.querySelector('.log-empty');
    if (empty) empty.remove();
    logBox.insertBefore(group, after === undefined ? null : groups.get(after).parentNode);
    groups.set(attempt, lines);
    return lines;
  }

  function appendChunks(chunks) {
    const atBottom = logBox.scrollHeight - logBox.scrollTop - logBox.clientHeight < 24;
    for (const chunk of chunks) {
      const key = `${chunk.dispatchAttempt}:${chunk.sequence}`;
      if (seen.has(key)) continue;
      seen.add(key);
      let nodes = logLineNodes(chunk);
      if (nodes.length > MAX_LOG_LINES) {
        hiddenLines += nodes.length - MAX_LOG_LINES;
        nodes = nodes.slice(-MAX_LOG_LINES);
      }
      shownLines += nodes.length;
      groupFor(chunk.dispatchAttempt).append(...nodes);
      trimLog();
    }
    if (atBottom) logBox.scrollTop = logBox.scrollHeight;
  }

  async function pullLog() {
    if (logDone) return;
    const finishedBefore = Boolean(job?.terminal);
    let more = false;
    let rounds = 0;
    do {
      const page = await get(`/api/remote-runners/jobs/${enc(id)}/stream${query({ after: logCursor, limit: 200 })}`);
      if (destroyed) return;
      appendChunks(page.chunks || []);
      if (page.cursor) logCursor = page.cursor;
      more = Boolean(page.more);
      rounds += 1;
    } while (more && rounds < 50 && !destroyed);
    if (!more && finishedBefore) {
      logDone = true;
      logStatus.textContent = 'complete';
      if (!seen.size) replace(logBox, h('div.muted.log-empty', 'This job produced no output.'));
    } else {
      logStatus.textContent = 'following…';
    }
  }

  let stopJob = null;
  let stopLog = null;
  function startFollowing() {
    if (!stopJob) {
      stopJob = poller(async () => {
        await load();
        if (job?.terminal) {
          stopJob();
          stopJob = null;
        }
      }, JOB_POLL_MS);
    }
    if (!stopLog) {
      logDone = false;
      stopLog = poller(async () => {
        await pullLog();
        if (logDone) {
          stopLog();
          stopLog = null;
        }
      }, LOG_POLL_MS);
    }
  }

  (async () => {
    await load();
    if (destroyed) return;
    try {
      await pullLog();
    } catch (error) {
      replace(logBox, errorBox(error));
    }
    if (!job?.terminal || !logDone) startFollowing();
  })();

  return {
    el,
    destroy() {
      destroyed = true;
      if (stopJob) stopJob();
      if (stopLog) stopLog();
    },
  };
}
