// The failed jobs of the watched task, for the example page (app.js): the snapshot's first ones,
// the pages "Show more" adds (GET /api/tasks/<id>/events?status=...), and a job's details read
// when opened (the one event, GET /api/tasks/<id>/events?after=<id - 1>&limit=1): its error, its
// message log and the items of its chunk. Loaded before app.js, whose state and calls these
// functions use when they are called.
"use strict";

// The list shows the snapshot's first failures, then the pages "Show more" read from /events.
// An item is kept while its job is in the same state, so a details box someone opened stays open.
function showFailures(first) {
  const same = (a, b) => a.length === b.length && a.every((e, i) => failureKey(e) === failureKey(b[i]));
  if (same(first, failures.first)) return;
  failures = { first, more: [], loading: false };
  listFailures();
}

function listFailures() {
  const list = $("errors");
  const kept = new Map([...list.children].map((li) => [li.dataset.key, li]));
  list.replaceChildren(...[...failures.first, ...failures.more].map((e) => kept.get(failureKey(e)) ?? failureItem(e)));
}

const failureKey = (event) => `${event.id}:${event.status}:${event.attempt}`;

function showFailureCount(bad) {
  const listed = failures.first.length + failures.more.length;
  $("errors-note").textContent = bad === 0 ? "None." : listed < bad ? `Showing ${listed} of ${bad}.` : "";
  const more = $("more-errors");
  more.hidden = listed >= bad || failures.first.length === 0;
  more.disabled = failures.loading;
  more.textContent = `Show ${Math.min(ERRORS, bad - listed)} more`;
}

// The failed and error events after the last one listed, in id order: the next page of each
// status, merged (the first ones of the snapshot are both statuses' lowest ids).
async function showMoreFailures() {
  const task = current?.task;
  const listed = [...failures.first, ...failures.more];
  if (!task || listed.length === 0) return;
  const after = Math.max(...listed.map((e) => e.id));
  const statuses = UNDONE.filter((status) => task.counts[status] > 0);
  const shown = failures;
  shown.loading = true;
  showFailureCount(undone(task));
  try {
    const pages = await Promise.all(statuses.map((status) =>
      api(`api/tasks/${encodeURIComponent(task.id)}/events?status=${status}&after=${after}&limit=${ERRORS}`)));
    if (shown !== failures) return; // the list was replaced meanwhile (a new snapshot, a new task)
    const next = pages.flatMap((page) => page.items).sort((a, b) => a.id - b.id).slice(0, ERRORS);
    failures.more.push(...next);
    listFailures();
  } catch (error) {
    showError(error);
  } finally {
    shown.loading = false;
    if (current?.task) showFailureCount(undone(current.task));
  }
}

// One failed job in a line: status, message, job and attempt; its items and log in a details box.
function failureItem(event) {
  const li = document.createElement("li");
  li.dataset.key = failureKey(event);
  const badge = document.createElement("span");
  badge.className = `badge ${event.status}`;
  badge.textContent = event.status;
  const message = document.createElement("span");
  message.className = "message";
  // A business failure (JobFailed) is its message alone; a program error's text starts with its class.
  message.textContent = event.error ?? "(no message)";
  const jobId = document.createElement("code");
  jobId.className = "job-id";
  jobId.textContent = `job ${event.job_id} · attempt ${event.attempt}`;
  const details = document.createElement("details");
  const summary = document.createElement("summary");
  const items = event.items ?? (Array.isArray(event.params?.[0]) ? event.params[0].length : null);
  summary.textContent = items === null ? "Details" : `${items} item${items === 1 ? "" : "s"}`;
  details.append(summary);
  const taskId = current.id;
  details.addEventListener("toggle", () => details.open && fillDetails(details, taskId, event));
  li.append(badge, message, jobId, details);
  return li;
}

// A stream's summary has no parameters or log: they are read when the box is first opened.
async function fillDetails(details, taskId, event) {
  if (details.dataset.state) return; // loading or loaded
  details.dataset.state = "loading";
  let body = details.querySelector(".failure-details");
  if (!body) {
    body = document.createElement("div");
    body.className = "failure-details";
    details.append(body);
  }
  body.textContent = "Loading…";
  try {
    const full = event.params ? event : await loadEvent(taskId, event.id);
    body.replaceChildren(...eventDetails(full, event.error));
    details.dataset.state = "loaded";
  } catch (error) {
    body.textContent = `Could not load the job: ${error.message}`;
    details.dataset.state = ""; // opening the box again tries again
  }
}

// One event, whole: the events list after the id just before it, one item long.
async function loadEvent(taskId, id) {
  const page = await api(`api/tasks/${encodeURIComponent(taskId)}/events?after=${id - 1}&limit=1`);
  const event = page.items[0];
  if (event?.id !== id) throw new Error("the job is gone");
  return event;
}

// The job's items, its whole message if the line above shows it cut, and its log.
function eventDetails(event, shown) {
  const parts = [];
  if (event.error && event.error !== shown) {
    const error = document.createElement("p");
    error.className = "error-text";
    error.textContent = event.error;
    parts.push(error);
  }
  const chunk = event.params?.[0];
  const rows = Array.isArray(chunk) && chunk.length && chunk.every(isRecord) ? chunk : null;
  if (rows) {
    parts.push(itemsTable(rows.slice(0, ITEMS_SHOWN)));
    if (rows.length > ITEMS_SHOWN) parts.push(`… and ${rows.length - ITEMS_SHOWN} more items.`);
  } else {
    const pre = document.createElement("pre");
    pre.textContent = JSON.stringify(event.params, null, 2);
    parts.push(pre);
  }
  if (event.messages?.length) {
    const log = document.createElement("ol");
    log.className = "log";
    for (const m of event.messages) {
      const li = document.createElement("li");
      li.textContent = `${new Date(m.at).toLocaleTimeString()} ${m.status}: ${m.text}`;
      log.append(li);
    }
    parts.push(log);
  }
  return parts;
}

const isRecord = (value) => value !== null && typeof value === "object" && !Array.isArray(value);

// A chunk of records (e.g. CSV rows) as a table: one row per item, one column per key.
function itemsTable(rows) {
  const columns = [...new Set(rows.flatMap(Object.keys))];
  const table = document.createElement("table");
  table.className = "items";
  const head = table.createTHead().insertRow();
  for (const name of columns) {
    const th = document.createElement("th");
    th.scope = "col";
    th.textContent = name;
    head.append(th);
  }
  const body = table.createTBody();
  for (const item of rows) {
    const tr = body.insertRow();
    for (const name of columns) {
      const value = item[name];
      tr.insertCell().textContent = value === undefined ? "" : typeof value === "string" ? value : JSON.stringify(value);
    }
  }
  return table;
}
