// Calls to this node's API with the operator's token. The token lives in
// sessionStorage only: it goes when the tab closes, and no other tab or site sees it.

const TOKEN_KEY = "quiver.token";

/** The token of this tab, or null before login. */
export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

/** Keeps `value` as this tab's token. */
export function setToken(value) {
  sessionStorage.setItem(TOKEN_KEY, value);
}

/** Forgets the token (log out). */
export function clearToken() {
  sessionStorage.removeItem(TOKEN_KEY);
}

/** An API answer that was not a success: its status and the node's message. */
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/** Calls `path` with the token; resolves to the raw Response of a 2xx, throws ApiError otherwise. */
export async function call(path, options = {}) {
  const headers = new Headers(options.headers || {});
  const t = token();
  if (t) headers.set("Authorization", `Bearer ${t}`);
  const response = await fetch(path, { ...options, headers, cache: "no-store" });
  if (!response.ok) {
    throw new ApiError(response.status, await errorText(response));
  }
  return response;
}

/** `call`, parsed as JSON. A body cut off mid-stream (the query failed after it began) throws. */
export async function json(path, options = {}) {
  const response = await call(path, options);
  const text = await response.text();
  try {
    return JSON.parse(text);
  } catch {
    throw new ApiError(response.status, "the answer was cut off (the query failed while its result was sent)");
  }
}

async function errorText(response) {
  const text = await response.text().catch(() => "");
  try {
    const doc = JSON.parse(text);
    if (doc && doc.error) return `${response.status}: ${doc.error}`;
  } catch {
    // not JSON: show it as it is
  }
  return `${response.status}: ${text || response.statusText}`;
}
