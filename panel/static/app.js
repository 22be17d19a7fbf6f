// The shell: sign-in, the top bar, tabs and client-side routing under /remote-runners.

import { get, storedKey, storeKey, forgetKey, setUnauthorizedHandler } from './api.js';
import { h, replace, errorBox, refreshTimes, timeAgo } from './dom.js';
import { runnersView, runnerView } from './runners.js';
import { jobsView, jobView } from './jobs.js';
import { enrollmentView } from './enrollment.js';
import { storageView } from './storage.js';
import { queuesView } from './queues.js';

const BASE = '/remote-runners';
const app = document.getElementById('app');

/** The signed-in key's identity: {organization, apiKey, canAdmin, canCancel}. */
let session = null;
/** The current view: {el, destroy()}. */
let current = null;

export function navigate(path, { replace: replaceState = false } = {}) {
  if (path !== location.pathname + location.search) {
    if (replaceState) history.replaceState(null, '', path);
    else history.pushState(null, '', path);
  }
  render();
}

function permissions(identity) {
  const scopes = identity.apiKey?.scopes || [];
  const role = identity.apiKey?.role;
  return {
    ...identity,
    canRead: scopes.includes('runs:read') || scopes.includes('admin:org'),
    canAdmin: scopes.includes('admin:org') && role === 'admin',
    canCancel: scopes.includes('runs:write'),
  };
}

// ------------------------------------------------------------------------------------------
// Sign-in
// ------------------------------------------------------------------------------------------

function signInForm(message) {
  const input = h('input#api-key', {
    type: 'password',
    name: 'api-key',
    autocomplete: 'off',
    spellcheck: false,
    required: true,
    placeholder: 'erk_…',
    testid: 'signin-key',
    'aria-describedby': 'signin-help',
  });
  const status = h('div.signin-status', { 'aria-live': 'polite' }, message ? errorBox(message) : null);
  const button = h('button.btn.btn-primary', { type: 'submit', testid: 'signin-submit' }, 'Sign in');
  const form = h('form.signin-card', { testid: 'signin-form', noValidate: true },
    h('h1', 'Sign in'),
    h('p.muted#signin-help',
      'Paste an API key (erk_…). It is kept in this tab only (sessionStorage) and forgotten when you sign out or close the tab.'),
    h('label', { htmlFor: 'api-key' }, 'API key'),
    input,
    status,
    h('div.form-actions', button));
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const key = input.value.trim();
    if (!key) {
      replace(status, errorBox({ code: 'MISSING_KEY', message: 'Enter an API key.' }));
      input.focus();
      return;
    }
    button.disabled = true;
    replace(status, h('span.muted', 'Checking…'));
    try {
      const identity = await get('/api/developer/api-keys/self', { key });
      storeKey(key);
      session = permissions(identity);
      render();
    } catch (error) {
      replace(status, errorBox(error, 'That key was not accepted: '));
      button.disabled = false;
      input.select();
      input.focus();
    }
  });
  return h('main.signin', { testid: 'signin' }, form);
}

function signOut() {
  forgetKey();
  session = null;
  render();
}

// ------------------------------------------------------------------------------------------
// Shell
// ------------------------------------------------------------------------------------------

function topBar(tab) {
  const key = session.apiKey || {};
  return h('header.topbar', { testid: 'topbar' },
    h('div.topbar-inner',
      h('a.brand', { href: BASE, testid: 'brand' },
        h('span.brand-mark', { 'aria-hidden': 'true' }, '▸'),
        h('span', 'edgerunner'),
        h('span.brand-sep', { 'aria-hidden': 'true' }, ' · '),
        h('span.brand-sub', 'Remote Runners')),
      h('nav.tabs', { 'aria-label': 'Sections' },
        h('a.tab', { href: BASE, testid: 'tab-runners', 'aria-current': tab === 'runners' ? 'page' : null }, 'Runners'),
        h('a.tab', { href: `${BASE}/queues`, testid: 'tab-queues', 'aria-current': tab === 'queues' ? 'page' : null }, 'Queues'),
        h('a.tab', { href: `${BASE}/jobs`, testid: 'tab-jobs', 'aria-current': tab === 'jobs' ? 'page' : null }, 'Jobs'),
        session.canAdmin ? h('a.tab', { href: `${BASE}/storage`, testid: 'tab-storage', 'aria-current': tab === 'storage' ? 'page' : null }, 'Storage') : null),
      h('div.identity', { testid: 'identity' },
        h('div.identity-text',
          h('span.org', { testid: 'identity-org', title: session.organization?.id || '' }, session.organization?.name || ''),
          h('span.keyline',
            h('span', { testid: 'identity-key' }, key.name || key.prefix || 'API key'),
            ' · ',
            h('span', { testid: 'identity-role' }, key.role || ''),
            ' · ',
            h('span.scopes', { testid: 'identity-scopes' }, (key.scopes || []).join(' ')),
            key.expiresAt ? [' · expires ', timeAgo(key.expiresAt, 'identity-expires')] : null)),
        h('button.btn.btn-small', { type: 'button', testid: 'signout', on: { click: signOut } }, 'Sign out'))));
}

function route(pathname) {
  let path = pathname.replace(/\/+$/, '');
  if (!path.startsWith(BASE)) path = BASE;
  let rest;
  try {
    rest = path.slice(BASE.length).split('/').filter(Boolean).map(decodeURIComponent);
  } catch {
    rest = ['not-found'];
  }
  if (rest.length === 0) return { tab: 'runners', view: () => runnersView(ctx()) };
  if (rest[0] === 'runners' && rest.length === 1) return { tab: 'runners', view: () => runnersView(ctx()) };
  if (rest[0] === 'runners' && rest.length === 2) return { tab: 'runners', view: () => runnerView(ctx(), rest[1]) };
  if (rest[0] === 'enrollment' && rest.length === 1) return { tab: 'runners', view: () => enrollmentView(ctx()) };
  if (rest[0] === 'queues' && rest.length === 1) return { tab: 'queues', view: () => queuesView(ctx()) };
  if (rest[0] === 'jobs' && rest.length === 1) return { tab: 'jobs', view: () => jobsView(ctx()) };
  if (rest[0] === 'jobs' && rest.length === 2) return { tab: 'jobs', view: () => jobView(ctx(), rest[1]) };
  if (rest[0] === 'storage' && rest.length === 1) return { tab: 'storage', view: () => storageView(ctx()) };
  return {
    tab: null,
    view: () => ({
      el: h('div.page', h('h1', 'Not found'), h('p', 'There is no such page. ', h('a', { href: BASE }, 'Back to runners'), '.')),
      destroy() {},
    }),
  };
}

function ctx() {
  return { session, navigate, base: BASE };
}

async function render() {
  if (current) {
    current.destroy();
    current = null;
  }
  if (!storedKey()) {
    session = null;
    replace(app, signInForm());
    document.title = 'Sign in · edgerunner';
    app.querySelector('input')?.focus();
    return;
  }
  if (!session) {
    replace(app, h('div.loading', 'Loading…'));
    try {
      session = permissions(await get('/api/developer/api-keys/self'));
    } catch (error) {
      if (error.status === 401) {
        forgetKey();
        replace(app, signInForm(error));
      } else {
        replace(app, h('main.page', errorBox(error),
          h('p', h('button.btn', { type: 'button', on: { click: () => render() } }, 'Retry'),
            ' ', h('button.btn', { type: 'button', on: { click: signOut } }, 'Sign out'))));
      }
      return;
    }
  }
  const { tab, view } = route(location.pathname);
  const main = h('main.page', { id: 'main', tabIndex: -1 });
  replace(app, h('a.skip', { href: '#main' }, 'Skip to content'), topBar(tab), main);
  current = view();
  main.appendChild(current.el);
  refreshTimes(main);
}

setUnauthorizedHandler(() => {
  // The key was revoked while in use: back to sign-in with the reason.
  forgetKey();
  session = null;
  if (current) {
    current.destroy();
    current = null;
  }
  replace(app, signInForm({ code: 'AUTHENTICATION_FAILED', message: 'The API key is no longer accepted. Sign in again.' }));
});

// Same-origin links under /remote-runners navigate without a reload.
document.addEventListener('click', (event) => {
  if (event.defaultPrevented || event.button !== 0) return;
  if (event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
  const link = event.target.closest('a[href]');
  if (!link || link.hasAttribute('download') || link.target) return;
  const href = link.getAttribute('href');
  if (href === '#main') {
    event.preventDefault();
    document.getElementById('main')?.focus();
    return;
  }
  if (!href.startsWith(BASE) || href.startsWith(`${BASE}/static/`)) return;
  event.preventDefault();
  navigate(href);
  window.scrollTo(0, 0);
});

window.addEventListener('popstate', () => render());

render();
