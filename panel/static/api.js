// The HTTP client. The API key lives only in sessionStorage (this tab, until it closes or the
// admin signs out); it is never written to localStorage, a cookie or a URL.

const KEY_NAME = 'edgerunner.apiKey';

export function storedKey() {
  try {
    return sessionStorage.getItem(KEY_NAME);
  } catch {
    return null;
  }
}

export function storeKey(key) {
  sessionStorage.setItem(KEY_NAME, key);
}

export function forgetKey() {
  sessionStorage.removeItem(KEY_NAME);
}

export class ApiError extends Error {
  constructor(status, code, message, body) {
    super(message);
    this.status = status;
    this.code = code;
    this.body = body;
  }
}

/** Called when a request with the stored key answers 401 (revoked key, etc.). */
let onUnauthorized = null;
export function setUnauthorizedHandler(handler) {
  onUnauthorized = handler;
}

async function send(method, path, { body, key, accept = 'application/json' } = {}) {
  const token = key ?? storedKey();
  const headers = { accept };
  if (token) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  let response;
  try {
    response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: 'omit',
      cache: 'no-store',
    });
  } catch (cause) {
    throw new ApiError(0, 'NETWORK_ERROR', `The server could not be reached (${cause.message}).`);
  }
  if (!response.ok) {
    let code = `HTTP_${response.status}`;
    let message = response.statusText || 'Request failed';
    let parsed = null;
    try {
      parsed = await response.json();
      if (parsed && parsed.error) {
        code = parsed.error.code || code;
        message = parsed.error.message || message;
      }
    } catch {
      // not JSON; keep the status text
    }
    const error = new ApiError(response.status, code, message, parsed);
    if (response.status === 401 && key === undefined && onUnauthorized) onUnauthorized(error);
    throw error;
  }
  return response;
}

export async function api(method, path, body, options = {}) {
  const response = await send(method, path, { ...options, body });
  if (response.status === 204) return null;
  const text = await response.text();
  if (!text) return null;
  try {
    return JSON.parse(text);
  } catch {
    throw new ApiError(response.status, 'INVALID_RESPONSE', 'The server answered with something that is not JSON.');
  }
}

export const get = (path, options) => api('GET', path, undefined, options);
export const post = (path, body, options) => api('POST', path, body, options);
export const patch = (path, body, options) => api('PATCH', path, body, options);
export const put = (path, body, options) => api('PUT', path, body, options);
export const del = (path, options) => api('DELETE', path, undefined, options);

export async function getText(path) {
  const response = await send('GET', path, { accept: 'text/plain, */*' });
  return response.text();
}

export async function getBlob(path) {
  const response = await send('GET', path, { accept: 'application/json' });
  return response.blob();
}

/** Builds a query string from an object, skipping empty values. */
export function query(params) {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== '') search.set(key, String(value));
  }
  const text = search.toString();
  return text ? `?${text}` : '';
}

export const enc = encodeURIComponent;
