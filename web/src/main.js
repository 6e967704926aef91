// The nexus console (docs/console.md): the sessions view over one WebSocket, and terminals in
// xterm.js with reconnection and flow control. Every request goes to the gateway's own origin
// with the HttpOnly session cookie; nothing secret is in a URL.
import { Terminal } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";

const main = document.getElementById("main");
const statusEl = document.getElementById("status");
const wsBase = (location.protocol === "https:" ? "wss://" : "ws://") + location.host;
let leave = () => {}; // the current view's cleanup

function say(text, isError) {
  statusEl.textContent = text;
  statusEl.classList.toggle("error", !!isError);
}

// api calls the gateway's API; an ABI error becomes "CODE: message".
async function api(method, path, body) {
  const res = await fetch("/v1" + path, {
    method,
    credentials: "same-origin",
    headers: body === undefined ? {} : { "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  const data = text ? JSON.parse(text) : null;
  if (!res.ok) {
    const e = data && data.error ? data.error : { code: String(res.status), message: text };
    throw new Error(e.code + ": " + e.message);
  }
  return data;
}

function el(tag, attrs = {}, ...children) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k.startsWith("on")) n.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) n.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) n.append(c);
  return n;
}

function ago(iso) {
  if (!iso) return "";
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return Math.floor(s) + "s";
  if (s < 3600) return Math.floor(s / 60) + "m";
  if (s < 86400) return Math.floor(s / 3600) + "h";
  return Math.floor(s / 86400) + "d";
}

// --- the sessions view -------------------------------------------------------------------

function sessionsView() {
  const filters = { type: "", status: "active", project: "" };
  let sessions = [];
  const body = el("tbody");
  const typeSel = el("select", { id: "f-type", onchange: () => { filters.type = typeSel.value; render(); } },
    el("option", { value: "" }, "any"), ...["terminal", "ai-chat", "debug-stream", "network-stream", "meta-chat"].map((t) => el("option", { value: t }, t)));
  const statusSel = el("select", { id: "f-status", onchange: () => { filters.status = statusSel.value; render(); } },
    el("option", { value: "" }, "any"), ...["active", "closed", "expired"].map((t) => el("option", { value: t, selected: t === "active" }, t)));
  const projectIn = el("input", { id: "f-project", placeholder: "project or roadmap", oninput: () => { filters.project = projectIn.value.trim(); render(); } });
  const newProject = el("input", { id: "new-project", placeholder: "project id", "aria-label": "Project of the new terminal", value: localStorage.getItem("nexus.project") || "" });
  const newTerm = el("button", { type: "submit" }, "New terminal");
  const form = el("form", { class: "toolbar", onsubmit: async (ev) => {
    ev.preventDefault();
    try {
      localStorage.setItem("nexus.project", newProject.value.trim());
      const s = await api("POST", "/sessions", { type: "terminal", context: { projectId: newProject.value.trim() } });
      location.hash = "#/terminal/" + s.sessionId;
    } catch (e) { say(e.message, true); }
  } }, newProject, newTerm);
  const filtersBar = el("div", { class: "toolbar", role: "group", "aria-label": "Filters" },
    el("label", { for: "f-type" }, "Type", typeSel), el("label", { for: "f-status" }, "Status", statusSel), el("label", { for: "f-project" }, "Context", projectIn));
  const table = el("table", { "aria-label": "Sessions" },
    el("thead", {}, el("tr", {}, ...["Type", "Status", "Context", "Age", "Last activity", "Actions"].map((h, i) => el("th", { scope: "col", class: i === 3 || i === 4 ? "opt" : undefined }, h)))), body);
  main.replaceChildren(el("h2", {}, "Sessions"), form, filtersBar, table);

  async function control(id, command) {
    try {
      await api("POST", "/sessions/" + encodeURIComponent(id) + "/control", { command });
      say(command + ": done");
    } catch (e) { say(e.message, true); }
  }

  function render() {
    const rows = sessions.filter((s) => (!filters.type || s.type === filters.type) && (!filters.status || s.status === filters.status) &&
      (!filters.project || JSON.stringify(s.context || {}).includes(filters.project)));
    body.replaceChildren(...rows.map((s) => {
      const caps = s.capabilities || {};
      const ctx = Object.entries(s.context || {}).map(([k, v]) => k + "=" + v).join(" ");
      const actions = el("td", { class: "actions" });
      if (s.type === "terminal") actions.append(el("button", { type: "button", onclick: () => { location.hash = "#/terminal/" + s.sessionId; } }, "Open"));
      if (s.status === "active") {
        for (const [cmd, cap] of [["interrupt", caps.interrupt], ["pause", caps.pause], ["resume", caps.pause || caps.interrupt], ["restart", caps.restart], ["close", caps.close]]) {
          if (cap) actions.append(el("button", { type: "button", "aria-label": cmd + " " + s.sessionId, onclick: () => control(s.sessionId, cmd) }, cmd));
        }
      }
      return el("tr", { "data-id": s.sessionId },
        el("td", {}, s.type), el("td", { class: "status-" + s.status }, s.status), el("td", {}, ctx),
        el("td", { class: "opt" }, ago(s.createdAt)), el("td", { class: "opt" }, ago(s.lastActivityAt || s.createdAt)), actions);
    }));
    if (!rows.length) body.append(el("tr", {}, el("td", { colspan: 6 }, "No sessions match.")));
  }

  // One WebSocket; a snapshot after every change. It reconnects on its own.
  let ws, closed = false, delay = 250;
  const connect = () => {
    ws = new WebSocket(wsBase + "/v1/sessions/watch");
    ws.onmessage = (m) => { delay = 250; sessions = JSON.parse(m.data).sessions || []; render(); say("live"); };
    ws.onclose = () => { if (!closed) { say("reconnecting…"); setTimeout(connect, delay); delay = Math.min(delay * 2, 5000); } };
  };
  connect();
  const tick = setInterval(render, 10000); // ages move on
  return () => { closed = true; clearInterval(tick); ws.close(); };
}

// --- the terminal view -------------------------------------------------------------------

// A terminal session in xterm.js. The stream is opened with ack=client: the gateway writes at
// most a window of frames ahead of what this page has rendered, and the session's program
// waits while the window is full (xterm.js's flow-control guide, with the acknowledgment
// carried to the runtime's own flow control). A dropped connection reconnects after the last
// sequence rendered: the same shell, nothing lost, nothing twice.
function terminalView(id) {
  const term = new Terminal({ scrollback: 10000, cursorBlink: true, fontFamily: "ui-monospace, monospace", fontSize: 14 });
  const fit = new FitAddon();
  term.loadAddon(fit);
  const box = el("div", { class: "term", role: "application", "aria-label": "Terminal " + id });
  const conn = el("span", { class: "conn" }, "connecting…");
  main.replaceChildren(el("div", { class: "term-wrap" },
    el("div", { class: "toolbar" }, el("a", { href: "#/sessions" }, "← Sessions"), el("strong", {}, "terminal " + id.slice(0, 8)), conn), box));
  term.open(box);
  fit.fit();
  term.focus();

  let ws = null, closed = false, ended = false, delay = 100;
  let lastSeq = 0; // the newest event handled (rendered, for output)
  let acked = 0, ackTimer = null;
  const send = (m) => { if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(m)); };
  // Keystrokes typed while the connection is down wait for the next one, in order.
  const outbox = [];
  const input = (m) => {
    if (ws && ws.readyState === WebSocket.OPEN && !outbox.length) ws.send(JSON.stringify(m));
    else outbox.push(m);
  };
  const ack = (seq) => {
    acked = Math.max(acked, seq);
    if (!ackTimer) ackTimer = setTimeout(() => { ackTimer = null; send({ op: "ack", seq: acked }); }, 0);
  };
  const decode = (b64) => Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));

  const handle = (e) => {
    if (e.seq > 0 && e.seq <= lastSeq) return; // already rendered before a reconnection
    if (e.seq > 0) lastSeq = e.seq;
    const p = e.payload || {};
    if (e.event === "data" && p.type === "terminal-output") {
      const seq = e.seq;
      term.write(decode(p.content), () => ack(seq));
      return;
    }
    if (e.event === "close") { ended = true; conn.textContent = "session closed" + (p.reason ? " (" + p.reason + ")" : ""); }
    if (e.event === "error") say((p.error && p.error.code) + ": " + (p.error && p.error.message), true);
    if (e.seq > 0) ack(e.seq);
  };
  const connect = () => {
    ws = new WebSocket(wsBase + "/v1/sessions/" + encodeURIComponent(id) + "/stream?contentType=raw&ack=client&after=" + lastSeq);
    ws.onopen = () => {
      delay = 100;
      conn.textContent = "connected";
      send({ op: "resize", width: term.cols, height: term.rows });
      if (acked) send({ op: "ack", seq: acked });
      while (outbox.length) send(outbox.shift());
    };
    ws.onmessage = (m) => handle(JSON.parse(m.data));
    ws.onclose = () => {
      if (closed || ended) return;
      conn.textContent = "reconnecting…";
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 3000);
    };
  };
  connect();
  term.onData((d) => input({ op: "send", data: d }));
  term.onBinary((d) => input({ op: "send", data: btoa(d), encoding: "base64" }));
  term.onResize(({ cols, rows }) => send({ op: "resize", width: cols, height: rows }));
  const onResize = () => fit.fit();
  window.addEventListener("resize", onResize);
  // For the end-to-end tests: cut the connection as a network would.
  window.nexusConsole = { dropConnection: () => ws && ws.close(), lastSeq: () => lastSeq, term };
  return () => { closed = true; window.removeEventListener("resize", onResize); if (ws) ws.close(); term.dispose(); };
}

// --- routing -----------------------------------------------------------------------------

function route() {
  leave();
  say("");
  const h = location.hash || "#/sessions";
  const m = h.match(/^#\/terminal\/([\w-]+)$/);
  leave = m ? terminalView(m[1]) : sessionsView();
  if (!m) main.focus({ preventScroll: true });
}
window.addEventListener("hashchange", route);
route();
