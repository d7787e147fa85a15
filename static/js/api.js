// The JSON API as both pages use it: a CSRF token on every POST, errors as ApiError, and
// Server-Sent Events read from a POST response (EventSource can only GET).

let csrfToken = null;

export class ApiError extends Error {
  constructor(status, body = {}) {
    super(body.message || `HTTP ${status}`);
    this.status = status;
    this.code = body.error || (status === 0 ? "network" : "http_error");
    this.details = body.details || {};
  }
}

export function forgetCsrfToken() {
  csrfToken = null;
}

async function token() {
  if (!csrfToken) {
    const data = await request("GET", "/api/auth/csrf");
    csrfToken = data.csrf_token;
  }
  return csrfToken;
}

async function send(method, path, body, accept) {
  const headers = { Accept: accept };
  if (method !== "GET") {
    headers["Content-Type"] = "application/json";
    headers["X-CSRFToken"] = await token();
  }
  try {
    return await fetch(path, {
      method,
      headers,
      body: method === "GET" ? undefined : JSON.stringify(body ?? {}),
      credentials: "same-origin",
      cache: "no-store",
    });
  } catch (err) {
    throw new ApiError(0, { error: "network", message: err.message });
  }
}

async function request(method, path, body, retried = false) {
  const response = await send(method, path, body, "application/json");
  const data = await response.json().catch(() => ({}));
  if (data && typeof data.csrf_token === "string" && path !== "/api/auth/csrf") {
    csrfToken = data.csrf_token;
  }
  if (!response.ok) {
    // A token from before a log-in/out may no longer match the session: fetch a fresh one once.
    if (data.error === "csrf_failed" && !retried) {
      csrfToken = null;
      return request(method, path, body, true);
    }
    throw new ApiError(response.status, data);
  }
  return data;
}

// A POST whose answer is a file (the admin's report): the CSRF token as on every POST, the body as a Blob with
// the file name the server gave; an error answer is thrown as ApiError like any other.
async function download(path, body, retried = false) {
  const response = await send("POST", path, body, "application/zip, application/json");
  if (!response.ok) {
    const data = await response.json().catch(() => ({}));
    if (data.error === "csrf_failed" && !retried) {
      csrfToken = null;
      return download(path, body, true);
    }
    throw new ApiError(response.status, data);
  }
  const match = /filename="([^"]+)"/.exec(response.headers.get("Content-Disposition") || "");
  return { blob: await response.blob(), filename: match ? match[1] : "download" };
}

export const api = {
  get: (path) => request("GET", path),
  post: (path, body = {}) => request("POST", path, body),
  download: (path, body = {}) => download(path, body),
};

function parseEvent(chunk) {
  let name = "message";
  const data = [];
  for (const line of chunk.split("\n")) {
    if (line.startsWith("event:")) name = line.slice(6).trim();
    else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
  }
  if (!data.length) return null;
  try {
    return { name, data: JSON.parse(data.join("\n")) };
  } catch {
    return { name, data: data.join("\n") };
  }
}

/**
 * POST and read the reply as a stream of events; onEvent(name, data) is called for each.
 * Non-2xx answers throw ApiError before any event. A JSON answer (a server that does not
 * stream) is replayed as "message" and "reply" events.
 */
export async function postStream(path, body, onEvent) {
  const url = path + (path.includes("?") ? "&" : "?") + "stream=1";
  let response = await send("POST", url, body, "text/event-stream");
  if (response.status === 400) {
    const data = await response.clone().json().catch(() => ({}));
    if (data.error === "csrf_failed") {
      csrfToken = null;
      response = await send("POST", url, body, "text/event-stream");
    }
  }
  const type = response.headers.get("Content-Type") || "";
  if (!response.ok || !type.includes("text/event-stream")) {
    const data = await response.json().catch(() => ({}));
    if (!response.ok) throw new ApiError(response.status, data);
    if (data.message) onEvent("message", data.message);
    if (data.reply) onEvent("reply", data.reply);
    return;
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true }).replace(/\r\n/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const event = parseEvent(buffer.slice(0, end));
        buffer = buffer.slice(end + 2);
        if (event) onEvent(event.name, event.data);
      }
    }
  } catch (err) {
    throw new ApiError(0, { error: "network", message: err.message });
  }
  const last = parseEvent(buffer.trim());
  if (last) onEvent(last.name, last.data);
}
