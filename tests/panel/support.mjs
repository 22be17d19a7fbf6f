// What both panel suites share: the environment scripts/test sets, the browser launch,
// bounded waiting, and new organizations through scripts/bootstrap-admin.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { resolve } from 'node:path';
import { chromium } from 'playwright-core';

export const BASE_URL = (process.env.BASE_URL || '').replace(/\/+$/, '');
export const STATE_DIR = process.env.EDGERUNNER_STATE_DIR || '';
export const EDGERUNNER_BIN = process.env.EDGERUNNER_BIN || '';
export const CHROMIUM_BIN = process.env.CHROMIUM_BIN || '/usr/bin/chromium';
export const ARTIFACTS = resolve(process.env.PANEL_ARTIFACTS || 'target/panel');

/** Debian's chromium, headless; the flags keep it off the (closed) network. */
export function launchChromium() {
  return chromium.launch({
    executablePath: CHROMIUM_BIN,
    args: ['--headless=new', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}

export const pause = (ms) => new Promise((r) => setTimeout(r, ms));

/** Polls `check` until it returns a truthy value or `timeout` ms pass (then fails). */
export async function waitFor(what, check, { timeout = 20000, interval = 200 } = {}) {
  const deadline = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      const value = await check();
      if (value) return value;
      last = value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) {
      const detail = last instanceof Error ? last.message : JSON.stringify(last);
      throw new Error(`timed out after ${timeout} ms waiting for ${what} (last: ${detail})`);
    }
    await pause(interval);
  }
}

export function unique(prefix) {
  return `${prefix}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
}

export function run(file, args, options = {}) {
  return new Promise((resolveRun, reject) => {
    execFile(file, args, { timeout: 180000, maxBuffer: 16 << 20, ...options }, (error, stdout, stderr) => {
      if (error) {
        reject(new Error(`${file} ${args.join(' ')} failed: ${error.message}\nstdout:\n${stdout}\nstderr:\n${stderr}`));
      } else {
        resolveRun({ stdout, stderr });
      }
    });
  });
}

/** A new organization and its admin key (role admin, all three scopes). */
export async function newOrg(label) {
  let name;
  // bootstrap-admin writes through wrangler into the running server's local database, which the
  // server may hold for a moment (SQLITE_BUSY): a few bounded attempts.
  let stdout;
  for (let attempt = 1; ; attempt += 1) {
    name = unique(`panel-${label}`);
    try {
      ({ stdout } = await run('scripts/bootstrap-admin', ['--org', name, '--state', STATE_DIR]));
      break;
    } catch (error) {
      if (attempt >= 5 || !/SQLITE_BUSY|database is locked/i.test(error.message)) throw error;
      await pause(500 * attempt);
    }
  }
  const line = stdout.trim().split('\n').reverse().find((l) => l.trim().startsWith('{'));
  assert.ok(line, `bootstrap-admin printed no JSON line: ${stdout}`);
  const { organizationId, apiKey } = JSON.parse(line);
  assert.match(apiKey, /^erk_/);
  return { name, organizationId, adminKey: apiKey };
}

