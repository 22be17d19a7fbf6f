// The Enrollment page (under Runners): who may enroll a key-pair runner into this organization
// (the policy), and the enrollment tokens an admin issues for the `token` policy. A token is
// shown once, in a dialog, and never again.

import { get, post, api, enc } from './api.js';
import { h, replace, clear, badge, mono, card, emptyState, errorBox, table, row, timeAgo, syncRows } from './dom.js';
import { openDialog, copyBlock } from './dialog.js';

const POLICY = '/api/developer/enrollment-policy';
const TOKENS = '/api/developer/enrollment-tokens';

const POLICIES = [
  ['open', 'Open', 'Any machine that knows the organization id may enroll and wait for approval (at most 5 waiting per network; each expires after 24 hours unless approved).'],
  ['token', 'Token', 'Only a machine presenting an enrollment token issued here may enroll. It still waits for approval.'],
  ['closed', 'Closed', 'Every enrollment is refused. Runners already enrolled are not affected.'],
];

const TOKEN_COLUMNS = ['Name', 'Prefix', 'State', 'Uses', 'Expires', 'Last used', ''];

const LIFETIMES = [
  ['3600', '1 hour'],
  ['86400', '24 hours'],
  ['604800', '7 days'],
  ['2592000', '30 days'],
];

export function enrollmentView(ctx) {
  const { session, base } = ctx;
  let destroyed = false;

  if (!session.canAdmin) {
    return {
      el: h('div.view', { testid: 'enrollment-view' },
        h('div.page-head', h('div', h('h1', 'Enrollment'))),
        emptyState('Enrollment settings need an API key with admin:org and the admin role.')),
      destroy() {},
    };
  }

  // -- the policy ---------------------------------------------------------------------------

  const radios = POLICIES.map(([value]) => h('input', {
    type: 'radio', name: 'enrollment-policy', value, id: `policy-${value}`, testid: `policy-${value}`,
  }));
  const current = h('span', { testid: 'policy-current' }, '…');
  const policyStatus = h('div.dialog-status', { 'aria-live': 'polite' });
  const save = h('button.btn.btn-primary', { type: 'submit', testid: 'policy-save', disabled: true }, 'Save policy');
  const policyForm = h('form.dialog-form', { noValidate: true, testid: 'policy-form' },
    h('fieldset.field.policies',
      h('legend', 'Who may enroll a key-pair runner'),
      POLICIES.map(([value, label, help], i) => h('label.check.policy-option', { htmlFor: radios[i].id },
        radios[i], ' ', h('strong', label), h('span.help', ` ${help}`)))),
    policyStatus,
    h('div.form-actions', save));
  let stored = null;
  const chosen = () => radios.find((r) => r.checked)?.value;
  policyForm.addEventListener('change', () => {
    save.disabled = !chosen() || chosen() === stored;
  });
  policyForm.addEventListener('submit', async (event) => {
    event.preventDefault();
    const policy = chosen();
    if (!policy || policy === stored) return;
    save.disabled = true;
    replace(policyStatus, h('span.muted', 'Saving…'));
    try {
      showPolicy(await api('PUT', POLICY, { policy }));
      replace(policyStatus, h('span.muted', { testid: 'policy-saved' }, 'Saved.'));
    } catch (error) {
      replace(policyStatus, errorBox(error));
      save.disabled = false;
    }
  });

  function showPolicy(answer) {
    stored = answer.policy;
    replace(current, badge(stored, 'policy-badge'));
    for (const radio of radios) radio.checked = radio.value === stored;
    save.disabled = true;
  }

  // -- the tokens ---------------------------------------------------------------------------

  const tbody = h('tbody', { testid: 'tokens-body' });
  const tokensTable = table(TOKEN_COLUMNS, tbody, 'tokens-table');
  const tokensStatus = h('div.status-area', { 'aria-live': 'polite' });
  const empty = h('div');
  const issue = h('button.btn.btn-primary', { type: 'button', testid: 'issue-token' }, 'Issue token');
  issue.addEventListener('click', () => issueDialog({ session, onIssued: () => loadTokens() }));

  function tokenRow(token) {
    // Whether it may be revoked is the API's to say (`actions`).
    const revocable = (token.actions || []).includes('revoke');
    const revoke = revocable
      ? h('button.btn.btn-small', { type: 'button', testid: 'token-revoke', dataset: { key: token.id } }, 'Revoke')
      : h('span.muted', '—');
    if (revocable) {
      revoke.addEventListener('click', async () => {
        revoke.disabled = true;
        try {
          await api('DELETE', `${TOKENS}/${enc(token.id)}`);
          clear(tokensStatus);
          await loadTokens();
        } catch (error) {
          replace(tokensStatus, errorBox(error));
          revoke.disabled = false;
        }
      });
    }
    return row([
      h('span.strong', { testid: 'token-name' }, token.name),
      mono(token.prefix, { testid: 'token-prefix' }),
      badge(token.state, 'token-state'),
      h('span', { testid: 'token-uses' }, `${token.uses} / ${token.maxUses}`),
      timeAgo(token.expiresAt, 'token-expires'),
      timeAgo(token.lastUsedAt, 'token-last-used'),
      revoke,
    ], { testid: 'token-row', dataset: { tokenId: token.id, sig: JSON.stringify(token) } }, TOKEN_COLUMNS);
  }

  async function loadTokens() {
    let data;
    try {
      data = await get(TOKENS);
    } catch (error) {
      if (!destroyed) replace(tokensStatus, errorBox(error));
      return;
    }
    if (destroyed) return;
    const tokens = data.enrollmentTokens || [];
    tokensTable.hidden = tokens.length === 0;
    replace(empty, tokens.length ? null : emptyState('No enrollment tokens yet. Issue one for each machine (or batch of machines) you set up.', 'tokens-empty'));
    syncRows(tbody, tokens, (token) => token.id, tokenRow);
  }

  const el = h('div.view.view-enrollment', { testid: 'enrollment-view' },
    h('div.page-head',
      h('div', h('h1', 'Enrollment'),
        h('span.muted.head-note', 'Who may enroll a key-pair runner into ', session.organization?.name || 'this organization'),
        h('p', h('a', { href: base, testid: 'back-to-runners' }, '← Runners')))),
    h('div.cards',
      card(h('span', 'Policy ', current), policyForm, { testid: 'policy-card' }),
      card('Enrollment tokens',
        h('div',
          h('p.help', 'A token admits as many enrollments as its uses, until it expires or is revoked. Give it to the runner as ',
            h('code', 'EDGERUNNER_ENROLLMENT_TOKEN'), ' or in a file named by ', h('code', '--enrollment-token-file'), '. It is shown once, when issued.'),
          tokensStatus, empty, tokensTable),
        { testid: 'tokens-card', actions: issue })));

  get(POLICY).then((answer) => {
    if (!destroyed) showPolicy(answer);
  }, (error) => {
    if (!destroyed) replace(policyStatus, errorBox(error));
  });
  loadTokens();
  return {
    el,
    destroy() {
      destroyed = true;
    },
  };
}

function issueDialog({ session, onIssued }) {
  const name = h('input#token-name', { type: 'text', testid: 'issue-name', maxLength: 200, autocomplete: 'off', placeholder: 'e.g. rack 4' });
  const uses = h('input#token-uses', { type: 'number', min: 1, max: 1000, step: 1, value: '1', required: true, testid: 'issue-uses' });
  const lifetime = h('select#token-lifetime', { testid: 'issue-lifetime' },
    LIFETIMES.map(([seconds, label]) => h('option', { value: seconds, selected: seconds === '86400' }, label)));
  const status = h('div.dialog-status', { 'aria-live': 'polite' });
  const submit = h('button.btn.btn-primary', { type: 'submit', testid: 'issue-submit' }, 'Issue token');
  const cancel = h('button.btn', { type: 'button', testid: 'cancel' }, 'Cancel');
  const form = h('form.dialog-form', { noValidate: true, testid: 'issue-form' },
    h('div.field', h('label', { htmlFor: 'token-name' }, 'Name (what it is for)'), name),
    h('div.field', h('label', { htmlFor: 'token-uses' }, 'Enrollments it admits (1–1000)'), uses),
    h('div.field', h('label', { htmlFor: 'token-lifetime' }, 'Expires after'), lifetime),
    status,
    h('div.form-actions', cancel, submit));
  const { close } = openDialog({ title: 'Issue enrollment token', testid: 'issue-dialog', body: form });
  cancel.addEventListener('click', close);
  name.focus();
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const count = Number(uses.value);
    if (!Number.isInteger(count) || count < 1 || count > 1000) {
      uses.setAttribute('aria-invalid', 'true');
      replace(status, errorBox({ code: 'INVALID_INPUT', message: 'Enrollments it admits must be a whole number from 1 to 1000.' }));
      return;
    }
    uses.removeAttribute('aria-invalid');
    const body = { maxUses: count, expiresInSeconds: Number(lifetime.value) };
    if (name.value.trim()) body.name = name.value.trim();
    submit.disabled = true;
    replace(status, h('span.muted', 'Issuing…'));
    try {
      const answer = await post(TOKENS, body);
      close();
      shownOnce(answer, session);
      if (onIssued) onIssued(answer);
    } catch (error) {
      replace(status, errorBox(error));
      submit.disabled = false;
    }
  });
}

/**
 * Shows an enrollment token once. It lives only in this function's closure and the dialog's
 * nodes; closing the dialog removes them, and nothing is written to any storage.
 */
function shownOnce(answer, session) {
  const token = answer.enrollmentToken;
  const org = session.organization?.id || '<organization id>';
  const cli = `EDGERUNNER_ENROLLMENT_TOKEN=${token} \\\n  edgerunner runner enroll --server ${location.origin} --organization ${org} \\\n  --execution-kind prompt --runtime python3.12`;
  const done = h('button.btn.btn-primary', { type: 'button', testid: 'token-done' }, 'I have stored it — close');
  const body = h('div.token-body', { testid: 'enrollment-token-body' },
    h('div.warning', { role: 'alert', testid: 'token-warning' },
      h('strong', 'This token is shown once. Give it to the runner\u2019s operator now; it cannot be recovered.'),
      ' Closing this dialog or reloading the page loses it for good; you would issue a new one.'),
    h('p', `${answer.name} · admits ${answer.maxUses} enrollment${answer.maxUses === 1 ? '' : 's'} · expires ${new Date(answer.expiresAt).toLocaleString()}`),
    copyBlock('Enrollment token', token, 'enrollment-token'),
    copyBlock('Enroll a runner with it (CLI)', cli, 'enrollment-token-cli'));
  const { close } = openDialog({ title: 'Enrollment token issued', testid: 'enrollment-token-dialog', body, footer: done, wide: true });
  done.addEventListener('click', close);
  done.focus();
}
