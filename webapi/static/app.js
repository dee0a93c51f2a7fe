// Example client of the AsyncTask HTTP API. Plain JavaScript, no build step, no framework:
// copy what you need. Everything the page shows comes from these calls:
//   GET  /api/jobs                 jobs you may submit (with their item schema)
//   POST /api/tasks                create a task from items (JSON, CSV or NDJSON body)
//   GET  /api/tasks/<id>/stream    live snapshots (Server-Sent Events)
//   GET  /api/tasks/<id>           one snapshot (the polling fallback)
//   POST /api/tasks/<id>/cancel    and  /retry
//   GET  /api/tasks                your recent tasks
"use strict";

const $ = (id) => document.getElementById(id);
const TOKEN_KEY = "asynctask.token";
// A task is over in these states, and when "cancelled" once nothing is still running.
const FINAL = new Set(["finished", "finished_with_errors", "aborted"]);
const COUNTS = ["enqueue", "working", "finish", "failed", "error", "cancelled"];
// Milliseconds before a stream the server ended is opened again (as the stream's "retry:" says).
const RECONNECT_MS = 2000;

let jobs = []; // from GET /api/jobs
let current = null; // the task being watched: { id, abort: AbortController, timer }

// ---------------------------------------------------------------------------- API calls

class ApiError extends Error {
  constructor(status, error) {
    super(error.message);
    this.status = status;
    this.code = error.code;
    this.details = error.details;
  }
}

function authHeaders() {
  // The token goes in a header, never in a URL (URLs end up in logs and browser history).
  const token = $("token").value.trim();
  return token ? { Authorization: `Bearer ${token}` } : {};
}

// Every error has the same body: {"error": {"code", "message", "details"}}.
async function errorOf(response) {
  const data = await response.json().catch(() => null);
  return new ApiError(response.status, data?.error ?? { code: `http_${response.status}`, message: response.statusText });
}

// fetch() with the token; returns the parsed JSON, throws ApiError on a 4xx/5xx.
async function api(path, { method = "GET", body, type } = {}) {
  const headers = authHeaders();
  if (type) headers["Content-Type"] = type;
  const response = await fetch(path, { method, headers, body });
  if (!response.ok) throw await errorOf(response);
  return response.json();
}

function showError(error) {
  const box = $("api-error");
  box.replaceChildren();
  box.hidden = !error;
  if (!error) return;
  const title = document.createElement("strong");
  title.textContent = error instanceof ApiError ? `${error.status} ${error.code}` : "Error";
  const message = document.createElement("p");
  message.textContent = error.message;
  box.append(title, message);
  // validation_failed lists the bad items: index, JSON pointer inside the item, message.
  const problems = error.details?.errors;
  if (Array.isArray(problems)) {
    const list = document.createElement("ul");
    for (const p of problems) {
      const li = document.createElement("li");
      li.textContent = `item ${p.item}${p.path ? ` at ${p.path}` : ""}: ${p.message}`;
      list.append(li);
    }
    box.append(list);
    if (error.details.error_count > problems.length) box.append(`${error.details.error_count} errors in all.`);
  } else if (error.details) {
    const pre = document.createElement("pre");
    pre.textContent = JSON.stringify(error.details);
    box.append(pre);
  }
  if (error.code === "unauthorized") box.append("Enter a valid API token above.");
  box.scrollIntoView({ block: "nearest" }); // the form may be scrolled far below the box
}

// ---------------------------------------------------------------------------- jobs

async function loadJobs() {
  try {
    jobs = (await api("/api/jobs")).jobs;
  } catch (error) {
    showError(error);
    return;
  }
  showError(null);
  const select = $("job");
  const previous = select.value;
  select.replaceChildren(new Option("— pick a job —", ""), ...jobs.map((job) => new Option(job.name, job.name)));
  select.value = jobs.some((job) => job.name === previous) ? previous : (jobs[0]?.name ?? "");
  showJob();
  loadTasks();
}

function showJob() {
  const job = jobs.find((j) => j.name === $("job").value);
  $("job-description").textContent = job ? `${job.description ?? "(no description)"} — queue ${job.queue}` : "";
  $("job-schema-box").hidden = !job?.schema;
  $("job-schema").textContent = job?.schema ? JSON.stringify(job.schema, null, 2) : "";
}

// ---------------------------------------------------------------------------- submit

async function submit(event) {
  event.preventDefault();
  showError(null);
  const job = $("job").value;
  const chunkSize = Number($("chunk-size").value || 1);
  $("submit").disabled = true;
  try {
    const request = $("source-file").checked
      ? await fileRequest(job, chunkSize)
      : jsonRequest(job, chunkSize, $("items-json").value);
    const created = await api(request.path, { method: "POST", body: request.body, type: request.type });
    watch(created.task_id);
    loadTasks();
  } catch (error) {
    showError(error); // 422 validation_failed shows which items are wrong
  } finally {
    $("submit").disabled = false;
  }
}

// A CSV or NDJSON file is sent as the raw request body, options in the query string: the
// server parses it as a stream, so a big file never has to become one huge JSON document.
async function fileRequest(job, chunkSize) {
  const file = $("file").files[0];
  if (!file) throw new Error("Choose a file first.");
  const name = file.name.toLowerCase();
  if (name.endsWith(".json")) return jsonRequest(job, chunkSize, await file.text());
  const type = name.endsWith(".ndjson") || name.endsWith(".jsonl") ? "application/x-ndjson" : "text/csv";
  const query = new URLSearchParams({ job, chunk_size: String(chunkSize) });
  return { path: `/api/tasks?${query}`, body: file, type };
}

function jsonRequest(job, chunkSize, text) {
  let items;
  try {
    items = JSON.parse(text);
  } catch (error) {
    throw new Error(`The items are not valid JSON: ${error.message}`);
  }
  const body = JSON.stringify({ job, items, chunk_size: chunkSize });
  return { path: "/api/tasks", body, type: "application/json" };
}

// ---------------------------------------------------------------------------- watching a task

function watch(id) {
  stopWatching();
  current = { id, abort: new AbortController(), timer: null };
  $("task").hidden = false;
  $("task-id").textContent = id;
  $("errors").replaceChildren();
  stream(current);
}

function stopWatching() {
  if (!current) return;
  current.abort.abort();
  clearInterval(current.timer);
  current = null;
}

// EventSource cannot send an Authorization header, so the stream is read with fetch():
// the body is a ReadableStream of text in the Server-Sent Events format.
async function stream(watcher) {
  $("live-mode").textContent = "live (stream)";
  let received = false;
  try {
    const response = await fetch(`/api/tasks/${encodeURIComponent(watcher.id)}/stream`, {
      headers: { ...authHeaders(), Accept: "text/event-stream" },
      signal: watcher.abort.signal,
    });
    if (!response.ok) throw await errorOf(response);
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      // Events end with a blank line; the last piece may be an incomplete event: keep it.
      const blocks = buffer.split(/\r?\n\r?\n/);
      buffer = blocks.pop();
      for (const block of blocks) {
        const event = parseEvent(block);
        if (!event) continue; // a ": keepalive" comment
        const task = JSON.parse(event.data);
        received = true;
        render(task);
        if (event.type === "end") return finish(watcher);
      }
    }
    // The server ends a stream after a while (ASYNCTASK_API_STREAM_MAX_SECONDS): open a new one.
    if (received) {
      setTimeout(() => watcher.abort.signal.aborted || stream(watcher), RECONNECT_MS);
      return;
    }
    throw new Error("the stream closed before sending anything");
  } catch (error) {
    if (watcher.abort.signal.aborted) return; // we stopped it: another task was opened
    // 401, 404: polling would get the same. 429, 503: the server has no room for another stream.
    if (error instanceof ApiError && error.status !== 429 && error.status !== 503) return showError(error);
    poll(watcher); // network trouble, a proxy that buffers or cuts streams, …
  }
}

// One SSE block -> {type, data}. Its lines are "event: x", "data: y" (maybe several), ": comment".
function parseEvent(block) {
  let type = "message";
  const data = [];
  for (const line of block.split(/\r?\n/)) {
    if (line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "event") type = value;
    else if (field === "data") data.push(value);
  }
  return data.length ? { type, data: data.join("\n") } : null;
}

// The fallback: one snapshot a second until the task is over.
function poll(watcher) {
  $("live-mode").textContent = "polling every second (the stream failed)";
  const tick = async () => {
    try {
      const task = await api(`/api/tasks/${encodeURIComponent(watcher.id)}?errors=10`);
      if (watcher.abort.signal.aborted) return;
      render(task);
      if (isOver(task)) finish(watcher);
    } catch (error) {
      showError(error); // and keep trying: the server may be restarting
    }
  };
  watcher.timer = setInterval(tick, 1000);
  tick();
}

function finish(watcher) {
  clearInterval(watcher.timer);
  $("live-mode").textContent = "";
  loadTasks();
}

function isOver(task) {
  return FINAL.has(task.status) || (task.status === "cancelled" && task.counts.working === 0);
}

// ---------------------------------------------------------------------------- rendering

// Rounded down: the bar shows 100% only once every job is done.
const percent = (task) => Math.floor((task.progress ?? 0) * 100);

function render(task) {
  if (task.id !== current?.id) return; // a late answer about a task no longer shown
  const pct = percent(task);
  $("progress").setAttribute("aria-valuenow", String(pct));
  $("progress-bar").style.width = `${pct}%`;
  $("progress-text").textContent = `${pct}%`;
  $("status").textContent = task.status;
  $("status").dataset.status = task.status;
  $("done").textContent = `${task.done} of ${task.total} jobs done`;
  $("eta").textContent = formatEta(task.eta_seconds);
  for (const name of COUNTS) $(`count-${name}`).textContent = String(task.counts[name] ?? 0);

  const bad = task.counts.failed + task.counts.error;
  $("cancel").disabled = isOver(task) || task.status === "cancelled";
  // Retry re-enqueues the failed and error jobs; a cancelled task cannot be retried.
  $("retry").disabled = bad === 0 || task.status === "cancelled";

  // The snapshot holds the first few failed/error events; /events pages through all of them.
  const errors = task.errors ?? [];
  $("errors-note").textContent = bad === 0 ? "None."
    : errors.length < bad ? `The first ${errors.length} of ${bad}; all: GET ${task.urls?.events ?? "/api/tasks/<id>/events"}?status=failed`
    : "";
  $("errors").replaceChildren(...errors.map(errorItem));
}

function errorItem(event) {
  const li = document.createElement("li");
  const badge = document.createElement("span");
  badge.className = `badge ${event.status}`;
  badge.textContent = event.status;
  const message = document.createElement("span");
  message.className = "message";
  // A business failure (JobFailed) is its message alone; a program error's text starts with its class.
  message.textContent = event.error;
  const jobId = document.createElement("code");
  jobId.className = "job-id";
  jobId.textContent = `job ${event.job_id} · attempt ${event.attempt}`;
  const params = document.createElement("pre");
  params.textContent = JSON.stringify(event.params); // the job's arguments: [chunk of items]
  li.append(badge, message, jobId, params);
  return li;
}

function formatEta(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  if (seconds < 60) return `${Math.ceil(seconds)} s`;
  return `${Math.floor(seconds / 60)} min ${Math.ceil(seconds % 60)} s`;
}

// ---------------------------------------------------------------------------- actions

async function act(action) {
  if (!current) return;
  showError(null);
  const id = current.id;
  try {
    const result = await api(`/api/tasks/${encodeURIComponent(id)}/${action}`, { method: "POST" });
    // cancel answers with the Task; retry with {"retried": n, "task": Task}.
    const task = action === "retry" ? result.task : result;
    // Watch again: the previous stream may have ended, and after a retry the task runs again
    // (the answer already counts the retried jobs as waiting).
    watch(id);
    render(task);
  } catch (error) {
    showError(error); // e.g. 409 task_not_cancellable
  }
}

async function loadTasks() {
  let page;
  try {
    page = await api("/api/tasks?limit=20");
  } catch {
    return; // the jobs list shows the error already (usually a missing token)
  }
  const rows = page.items.map((task) => {
    const open = document.createElement("button");
    open.type = "button";
    open.className = "link";
    open.textContent = task.id;
    open.addEventListener("click", () => watch(task.id));
    const created = task.created_at ? new Date(task.created_at).toLocaleString() : "";
    const tr = document.createElement("tr");
    for (const cell of [open, task.job, task.status, `${percent(task)}%`, created]) {
      const td = document.createElement("td");
      td.append(cell);
      tr.append(td);
    }
    return tr;
  });
  $("tasks").replaceChildren(...rows);
}

// ---------------------------------------------------------------------------- wiring

$("token").value = localStorage.getItem(TOKEN_KEY) ?? "";
$("token").addEventListener("input", () => localStorage.setItem(TOKEN_KEY, $("token").value.trim()));
$("token").addEventListener("change", loadJobs);
$("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  loadJobs();
});
$("job").addEventListener("change", showJob);
// Choosing a file or typing items selects that source.
$("file").addEventListener("change", () => { $("source-file").checked = true; });
$("items-json").addEventListener("input", () => { $("source-json").checked = true; });
$("task-form").addEventListener("submit", submit);
$("cancel").addEventListener("click", () => act("cancel"));
$("retry").addEventListener("click", () => act("retry"));
$("refresh-tasks").addEventListener("click", loadTasks);
loadJobs();
