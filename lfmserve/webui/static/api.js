// The server's HTTP API as the page uses it: URLs relative to the page, the API key, error answers, and SSE.

/** sessionStorage key for the API key: kept for the tab's life, never written to disk by the page. */
const KEY_STORAGE = "lfmserve.apiKey";

/** An answer that is not 2xx, or an error sent inside a stream; `message` is the server's own. */
export class ApiError extends Error {
  constructor(message, status) {
    super(message);
    this.name = "ApiError";
    this.status = status;
  }
}

/** A URL for `path` relative to the page (never a leading "/"), so a path prefix in front of the server works. */
export function apiUrl(path) {
  return new URL(path, document.baseURI);
}

export class Api {
  /** `askKey(rejected)` shows the key dialog and resolves to a key, or null when the user cancels it. */
  constructor(askKey) {
    this.askKey = askKey;
    this.pendingKey = null; // one dialog for all the requests refused at the same time
  }

  /** fetch, with the API key when there is one; a 401 asks for the key and tries again. Throws ApiError. */
  async fetch(path, init = {}) {
    for (;;) {
      const key = sessionStorage.getItem(KEY_STORAGE);
      const headers = new Headers(init.headers);
      if (key) headers.set("Authorization", `Bearer ${key}`);
      const response = await fetch(apiUrl(path), { ...init, headers });
      if (response.ok) return response;
      if (response.status !== 401) throw new ApiError(await errorMessage(response), response.status);
      if (!(await this.newKey(key))) throw new ApiError("An API key is needed.", 401);
    }
  }

  async json(path, init) {
    return (await this.fetch(path, init)).json();
  }

  /** Ask for a key once for every request that `sent` the same refused key; false when cancelled. */
  async newKey(sent) {
    if (sessionStorage.getItem(KEY_STORAGE) !== sent) return true; // another request got a new key meanwhile
    this.pendingKey ??= this.askKey(sent !== null).finally(() => (this.pendingKey = null));
    const key = await this.pendingKey;
    if (key) sessionStorage.setItem(KEY_STORAGE, key);
    return Boolean(key);
  }
}

/**
 * The message of an error answer: llama-server's `{"error": {"message"}}` (or the bare `{"message"}` its /tools
 * answers), else the body or the status.
 */
async function errorMessage(response) {
  const text = await response.text();
  try {
    const body = JSON.parse(text);
    return body.error?.message ?? body.message ?? text;
  } catch {
    return text || `${response.status} ${response.statusText}`;
  }
}

/**
 * The JSON of each event of an SSE answer, until `data: [DONE]`. Errors inside the stream throw ApiError:
 * lfmserve sends them as an `error:` field, OpenAI-style servers as `data: {"error": ...}`.
 */
export async function* streamEvents(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, "");
      const event = parseEvent(block);
      if (event === null) continue;
      if (event === "[DONE]") return;
      yield event;
    }
  }
}

/** One SSE block as JSON; null for a comment or an empty block. */
function parseEvent(block) {
  const data = [];
  for (const line of block.split(/\r?\n/)) {
    const colon = line.indexOf(":");
    if (colon <= 0) continue; // a comment (":") or a line without a field
    const field = line.slice(0, colon);
    const value = line.slice(colon + 1).replace(/^ /, "");
    if (field === "data") data.push(value);
    if (field === "error") throw new ApiError(streamError(value));
  }
  if (data.length === 0) return null;
  const text = data.join("\n");
  if (text === "[DONE]") return text;
  const event = JSON.parse(text);
  if (event.error) throw new ApiError(event.error.message ?? JSON.stringify(event.error));
  return event;
}

function streamError(value) {
  try {
    const body = JSON.parse(value);
    return body.error?.message ?? body.message ?? value;
  } catch {
    return value;
  }
}
