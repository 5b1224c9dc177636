// runner serve's operator page: polls /ui/state every second with the operator token.
// Everything shown is put in with textContent: tenants choose session, tool and error texts.
"use strict";
const KEY = "runner-operator-token";
const EVERY_MS = 1000;

function takeToken() {
  const m = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (m) {
    sessionStorage.setItem(KEY, decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname);  // out of the address bar and the history
  }
  return sessionStorage.getItem(KEY);
}

function cell(row, text, cls) {
  const td = row.insertCell();
  td.textContent = text === null || text === undefined ? "" : String(text);
  if (cls) td.className = cls;
}

function fill(id, items, columns, empty) {
  const body = document.querySelector(`#${id} tbody`);
  const rows = [];
  for (const item of items) {
    const tr = document.createElement("tr");
    for (const col of columns) {
      const [value, cls] = col(item);
      cell(tr, value, cls);
    }
    rows.push(tr);
  }
  if (!rows.length) {
    const tr = document.createElement("tr");
    cell(tr, empty, "empty");
    tr.cells[0].colSpan = document.querySelectorAll(`#${id} th`).length;
    rows.push(tr);
  }
  body.replaceChildren(...rows);
}

const secs = (s) => s < 90 ? `${Math.round(s)} s` : s < 5400 ? `${Math.round(s / 60)} min` : `${(s / 3600).toFixed(1)} h`;
const clock = (t) => new Date(t * 1000).toLocaleTimeString();

function render(st) {
  fill("tenants", st.tenants, [
    (t) => [t.name], (t) => [t.open_sessions], (t) => [t.max_sessions], (t) => [t.calls_this_minute],
    (t) => [t.calls_per_minute], (t) => [t.in_flight], (t) => [t.policies.join(", ")],
    (t) => [t.images.join(", ") || "-"],
  ], "no tenants: runner tenants add NAME");
  fill("sessions", st.sessions, [
    (s) => [s.id], (s) => [s.tenant], (s) => [s.policy], (s) => [s.sandbox], (s) => [s.state],
    (s) => [secs(s.age_s)], (s) => [secs(s.idle_s)], (s) => [s.calls], (s) => [s.last_call || "-"],
  ], "no open session");
  fill("calls", st.calls, [
    (c) => [clock(c.time)], (c) => [c.tenant], (c) => [c.session], (c) => [c.call_id], (c) => [c.tool],
    (c) => [c.duration_ms], (c) => c.ok ? ["ok", "ok"] : ["error", "err"],
  ], "no call since the server started");
  fill("errors", st.errors, [
    (c) => [clock(c.time)], (c) => [c.tenant], (c) => [c.session], (c) => [c.call_id], (c) => [c.tool],
    (c) => [c.error, "err"],
  ], "no error since the server started");
  const status = document.getElementById("status");
  status.className = "";
  status.textContent = `version ${st.version}, up ${secs(st.uptime_s)}, updated ${clock(st.now)}`;
}

async function poll(token) {
  const status = document.getElementById("status");
  try {
    const r = await fetch("/ui/state", {headers: {Authorization: `Bearer ${token}`}, cache: "no-store"});
    if (r.status === 401) {
      sessionStorage.removeItem(KEY);
      status.className = "bad";
      status.textContent = "the operator token was refused";
      ask();
      return;
    }
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    render(await r.json());
    document.getElementById("main").hidden = false;
  } catch (e) {
    status.className = "bad";
    status.textContent = `not updated: ${e.message}`;
  }
  setTimeout(() => poll(token), EVERY_MS);
}

function ask() {
  const form = document.getElementById("login");
  form.hidden = false;
  form.onsubmit = (ev) => {
    ev.preventDefault();
    const token = document.getElementById("token").value.trim();
    if (!token) return;
    sessionStorage.setItem(KEY, token);
    form.hidden = true;
    poll(token);
  };
}

const token = takeToken();
if (token) poll(token); else { document.getElementById("status").textContent = "sign in"; ask(); }
