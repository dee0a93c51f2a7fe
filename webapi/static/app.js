// Example client of the AsyncTask HTTP API. Plain JavaScript, no build step, no framework:
// copy what you need. Everything the page shows comes from these calls:
//   GET  /api/jobs                 jobs you may submit (with their item schema)
//   POST /api/tasks                create a task from items (JSON, CSV or NDJSON body)
//   GET  /api/tasks/<id>/stream    live snapshots (Server-Sent Events)
//   GET  /api/tasks/<id>           one snapshot (the polling fallback)
//   GET  /api/tasks/<id>/events    a failed job's details, and the errors past the first ten
//   GET  /api/tasks/<id>/items     the items that failed in jobs that run their chunk one by one
//   POST /api/tasks/<id>/cancel    and  /retry
//   PATCH /api/tasks/<id>          a fed task's parallel and priority
//   POST /api/tasks/<id>/pause     and  /resume (a fed task)
//   GET  /api/tasks                your recent tasks
// Every URL is relative to the page: served at /jobs/ (an app that mounts the API under /jobs),
// the page calls /jobs/api/jobs. Requests carry the token typed, if any, and this origin's
// cookies: an app with a login of its own signs the page's calls in without a token.
"use strict";

const $ = (id) => document.getElementById(id);
const TOKEN_KEY = "asynctask.token";
// A task is over in these states, and when "cancelled" once nothing is still running.
const FINAL = new Set(["finished", "finished_with_errors", "aborted"]);
const COUNTS = ["enqueue", "working", "finish", "failed", "error", "cancelled", "stopped", "lost"];
// The jobs that did not do their work: listed among the failures, and retried by Retry.
const UNDONE = ["failed", "error", "lost"];
const undone = (task) => UNDONE.reduce((sum, status) => sum + (task.counts[status] ?? 0), 0);
// Milliseconds before a stream the server ended is opened again (as the stream's "retry:" says).
const RECONNECT_MS = 2000;
// Failed jobs a snapshot lists, and how many more each "Show more" adds.
const ERRORS = 10;
// Items of a failed job's chunk shown in its details.
const ITEMS_SHOWN = 50;

let jobs = []; // from GET /api/jobs
// The task being watched: { id, abort: AbortController, timer, task: its last snapshot,
// feedShown: its feed's inputs hold the values set (they are not overwritten while edited) }.
let current = null;
// "Your recent tasks": GET /api/tasks, with the watched task as its panel shows it, so the two
// never disagree (the panel's snapshot is the newer one while the task runs).
let tasks = [];
// The failed jobs listed: the snapshot's first ones, then the pages "Show more" added.
let failures = { first: [], more: [], loading: false };
// The failed items listed (GET /api/tasks/<id>/items), read again when the task's count moves.
let failedItems = { taskId: null, count: 0, items: [], next: null, loading: false };

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
  const response = await fetch(path, { method, headers, body, credentials: "same-origin" });
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
  // validation_failed lists the bad items: index, JSON pointer inside the item, message, and for
  // a CSV or NDJSON file the line (and the CSV column) a person can find in the file.
  const problems = error.details?.errors;
  if (Array.isArray(problems)) {
    const list = document.createElement("ul");
    for (const p of problems) {
      const li = document.createElement("li");
      li.textContent = `${problemPlace(p)}: ${p.message}`;
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

function problemPlace(problem) {
  const place = [problem.line !== undefined ? `line ${problem.line}` : `item ${problem.item}`];
  if (problem.column !== undefined) place.push(`column "${problem.column}"`);
  else if (problem.path && problem.path !== "/") place.push(`at ${problem.path}`);
  return place.join(", ");
}

// ---------------------------------------------------------------------------- jobs

async function loadJobs() {
  try {
    jobs = (await api("api/jobs")).jobs;
  } catch (error) {
    // No token typed yet: nothing went wrong, the page is waiting for one.
    const waiting = error instanceof ApiError && error.status === 401 && !$("token").value.trim();
    $("connect-note").hidden = !waiting;
    showError(waiting ? null : error);
    return;
  }
  $("connect-note").hidden = true;
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
  // Empty: the task is not fed, every job is queued at once.
  const parallel = $("parallel").value.trim();
  const options = parallel ? { parallel: Number(parallel) } : {};
  $("submit").disabled = true;
  try {
    const request = $("source-file").checked
      ? await fileRequest(job, chunkSize, options)
      : jsonRequest(job, chunkSize, $("items-json").value, options);
    const created = await api(request.path, { method: "POST", body: request.body, type: request.type });
    watch(created.task_id);
    // Said once, in the answer to the submission: no live worker takes the task's queue.
    showWarnings(created.warnings ?? []);
    loadTasks();
  } catch (error) {
    showError(error); // 422 validation_failed shows which items are wrong
  } finally {
    $("submit").disabled = false;
  }
}

// A CSV or NDJSON file is sent as the raw request body, options in the query string: the
// server parses it as a stream, so a big file never has to become one huge JSON document.
async function fileRequest(job, chunkSize, options) {
  const file = $("file").files[0];
  if (!file) throw new Error("Choose a file first.");
  const name = file.name.toLowerCase();
  if (name.endsWith(".json")) return jsonRequest(job, chunkSize, await file.text(), options);
  const type = name.endsWith(".ndjson") || name.endsWith(".jsonl") ? "application/x-ndjson" : "text/csv";
  const query = new URLSearchParams({ job, chunk_size: String(chunkSize), ...options });
  return { path: `api/tasks?${query}`, body: file, type };
}

function jsonRequest(job, chunkSize, text, options) {
  let items;
  try {
    items = JSON.parse(text);
  } catch (error) {
    throw new Error(`The items are not valid JSON: ${error.message}`);
  }
  const body = JSON.stringify({ job, items, chunk_size: chunkSize, ...options });
  return { path: "api/tasks", body, type: "application/json" };
}

// ---------------------------------------------------------------------------- watching a task

function watch(id) {
  stopWatching();
  current = { id, abort: new AbortController(), timer: null, task: null, feedShown: false };
  $("task").hidden = false;
  $("task-id").textContent = id;
  showWarnings([]);
  failures = { first: [], more: [], loading: false };
  $("errors").replaceChildren();
  stream(current);
}

function showWarnings(warnings) {
  $("task-warning").textContent = warnings.map((warning) => `Warning: ${warning.message}.`).join(" ");
  $("task-warning").hidden = warnings.length === 0;
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
    // The stream's snapshots list the first ERRORS failed jobs: its default (?errors=10).
    const response = await fetch(`api/tasks/${encodeURIComponent(watcher.id)}/stream`, {
      headers: { ...authHeaders(), Accept: "text/event-stream" },
      credentials: "same-origin",
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
      const task = await api(`api/tasks/${encodeURIComponent(watcher.id)}?errors=${ERRORS}`);
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
  current.task = task;
  const pct = percent(task);
  $("progress").setAttribute("aria-valuenow", String(pct));
  $("progress-bar").style.width = `${pct}%`;
  $("progress-text").textContent = `${pct}%`;
  $("status").textContent = task.status;
  $("status").dataset.status = task.status;
  // A worker took the queue: the submission's warning is stale.
  if (task.status !== "pending") $("task-warning").hidden = true;
  const items = task.items ?? { total: 0, done: 0, failed: 0 };
  const ran = items.done + items.failed;
  $("done").textContent = ran > 0
    ? `${ran} of ${items.total} items run (${items.failed} failed) · ${task.done} of ${task.total} jobs done`
    : `${task.done} of ${task.total} jobs done`;
  // A paused task has no ETA: nothing is released until it is resumed.
  $("eta").textContent = task.feed?.paused && task.status === "running" ? "paused" : formatEta(task.eta_seconds);
  for (const name of COUNTS) $(`count-${name}`).textContent = String(task.counts[name] ?? 0);

  const bad = undone(task);
  $("cancel").disabled = isOver(task) || task.status === "cancelled";
  renderFeed(task);
  // Retry re-enqueues the failed and error jobs; a cancelled task cannot be retried.
  $("retry").disabled = bad === 0 || task.status === "cancelled";

  // A stream's snapshot carries its errors only when they changed; a snapshot without them
  // leaves the list as it is.
  if (task.errors) showFailures(task.errors);
  showFailureCount(bad);
  showFailedItems(task);
  rememberTask(task);
}

// The first page of failed items, read when the task's failed count changes; "Show more" reads the next.
async function showFailedItems(task) {
  const count = task.items?.failed ?? 0;
  if (failedItems.taskId === task.id && failedItems.count === count) return;
  const shown = (failedItems = { taskId: task.id, count, items: [], next: null, loading: count > 0 });
  renderFailedItems();
  if (count === 0) return;
  await loadFailedItems(shown);
}

async function loadFailedItems(shown) {
  shown.loading = true;
  const after = shown.next ? `&after=${encodeURIComponent(shown.next)}` : "";
  try {
    const page = await api(`api/tasks/${encodeURIComponent(shown.taskId)}/items?status=failed&limit=${ITEMS_SHOWN}${after}`);
    if (shown !== failedItems) return; // replaced meanwhile
    shown.items.push(...page.items);
    shown.next = page.next;
  } catch (error) {
    showError(error);
  } finally {
    shown.loading = false;
    if (shown === failedItems) renderFailedItems();
  }
}

function renderFailedItems() {
  const shown = failedItems;
  $("failed-items").replaceChildren(...shown.items.map(failedItemLine));
  const more = $("more-items");
  more.hidden = !shown.next;
  more.disabled = shown.loading;
  $("items-note").textContent = shown.count === 0 ? "None." : `${shown.count} item${shown.count === 1 ? "" : "s"} failed.`;
}

// One failed item: why, then the item itself and the job whose chunk held it.
function failedItemLine(failed) {
  const li = document.createElement("li");
  const badge = document.createElement("span");
  badge.className = "badge failed";
  badge.textContent = "failed";
  const message = document.createElement("span");
  message.className = "message";
  message.textContent = failed.message || "(no message)";
  const item = document.createElement("code");
  item.className = "item";
  item.textContent = JSON.stringify(failed.item);
  const where = document.createElement("code");
  where.className = "job-id";
  where.textContent = `job ${failed.job_id} · item ${failed.position + 1}`;
  li.append(badge, message, item, where);
  return li;
}

// A fed task's feed: its state and held jobs, its settings in inputs to change, pause/resume.
function renderFeed(task) {
  const feed = task.feed;
  const ended = isOver(task) || task.status === "cancelled";
  for (const id of ["feed-summary", "feed-form", "priority-help", "pause", "resume"]) $(id).hidden = !feed;
  $("pause").disabled = !feed || ended || feed.paused;
  $("resume").disabled = !feed || ended || !feed.paused;
  $("feed-apply").disabled = !feed || ended;
  if (!feed) return;
  $("feed-state").textContent = ended ? "ended" : feed.paused ? "paused" : "releasing";
  $("feed-state").dataset.state = $("feed-state").textContent;
  // held is null when the server could not ask the broker.
  $("held").textContent = feed.held === null ? "?" : String(feed.held);
  $("feed-parallel-now").textContent = String(feed.parallel);
  $("feed-priority-now").textContent = String(feed.priority);
  if (!current.feedShown) {
    $("feed-parallel").value = String(feed.parallel);
    $("feed-priority").value = String(feed.priority);
    current.feedShown = true;
  }
}

// PATCH only what changed; the answer is the task with its feed as it is now.
async function applyFeed(event) {
  event.preventDefault();
  const task = current?.task;
  if (!task?.feed) return;
  showError(null);
  const change = {};
  for (const [name, input] of [["parallel", "feed-parallel"], ["priority", "feed-priority"]]) {
    const text = $(input).value.trim();
    if (text !== "" && Number(text) !== task.feed[name]) change[name] = Number(text);
  }
  if (Object.keys(change).length === 0) return;
  try {
    const changed = await api(`api/tasks/${encodeURIComponent(task.id)}`, {
      method: "PATCH", body: JSON.stringify(change), type: "application/json",
    });
    if (current?.id !== changed.id) return;
    current.feedShown = false;
    render(changed);
  } catch (error) {
    showError(error); // 422 names the field; 409 task_ended once the task is over
  }
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
    const result = await api(`api/tasks/${encodeURIComponent(id)}/${action}`, { method: "POST" });
    // cancel, pause and resume answer with the Task; retry with {"retried": n, "task": Task}.
    const task = action === "retry" ? result.task : result;
    // Watch again: the previous stream may have ended, and after a retry the task runs again
    // (the answer already counts the retried jobs as waiting).
    watch(id);
    render(task);
  } catch (error) {
    showError(error); // e.g. 409 task_not_cancellable, task_ended
  }
}

// ---------------------------------------------------------------------------- recent tasks

async function loadTasks() {
  let page;
  try {
    page = await api("api/tasks?limit=20");
  } catch {
    return; // the jobs list shows the error already (usually a missing token)
  }
  tasks = page.items;
  if (current?.task) rememberTask(current.task);
  showTasks();
}

// The watched task's snapshot replaces its row (or is added on top): one source for both.
function rememberTask(task) {
  const index = tasks.findIndex((t) => t.id === task.id);
  if (index < 0) {
    tasks.unshift(task);
    showTasks();
    return;
  }
  tasks[index] = task;
  const row = [...$("tasks").rows].find((tr) => tr.dataset.task === task.id);
  if (row) fillTaskRow(row, task);
  else showTasks();
}

function showTasks() {
  $("tasks").replaceChildren(...tasks.map((task) => {
    const tr = document.createElement("tr");
    tr.dataset.task = task.id;
    const open = document.createElement("button");
    open.type = "button";
    open.className = "link";
    open.textContent = task.id;
    open.addEventListener("click", () => watch(task.id));
    tr.insertCell().append(open);
    for (let i = 0; i < 4; i++) tr.insertCell();
    fillTaskRow(tr, task);
    return tr;
  }));
}

function fillTaskRow(tr, task) {
  const created = task.created_at ? new Date(task.created_at).toLocaleString() : "";
  const [, job, status, progress, when] = tr.cells;
  job.textContent = task.job;
  status.textContent = task.status;
  progress.textContent = `${percent(task)}%`;
  when.textContent = created;
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
$("pause").addEventListener("click", () => act("pause"));
$("resume").addEventListener("click", () => act("resume"));
$("feed-form").addEventListener("submit", applyFeed);
$("refresh-tasks").addEventListener("click", loadTasks);
$("more-errors").addEventListener("click", showMoreFailures);
$("more-items").addEventListener("click", () => loadFailedItems(failedItems));
loadJobs();
