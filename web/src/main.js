// The nexus console (docs/console.md): the sessions view over one WebSocket, and terminals in
// xterm.js with reconnection and flow control. Every request goes to the gateway's own origin
// with the HttpOnly session cookie; nothing secret is in a URL.
import { Terminal } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";
import { WebglAddon } from "@xterm/addon-webgl";

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

// shortId is the part of a session id that tells sessions apart: a UUIDv7 begins with its
// creation time (the same for sessions opened in the same minute) and ends with random bits.
const shortId = (id) => id.slice(-8);

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
  const newBackend = el("input", { id: "new-backend", placeholder: "backend (optional)", "aria-label": "Backend of the new AI chat", value: localStorage.getItem("nexus.backend") || "" });
  const newChat = el("button", { type: "button", onclick: async () => {
    // On a backend of config.toml (empty: the agent's), with the agent's workspace and level.
    try {
      const backend = newBackend.value.trim();
      localStorage.setItem("nexus.backend", backend);
      const s = await api("POST", "/sessions", { type: "ai-chat", options: backend ? { backend } : {} });
      location.hash = "#/chat/" + s.sessionId;
    } catch (e) { say(e.message, true); }
  } }, "New AI chat");
  const follow = el("input", { id: "new-log", placeholder: "process id, or gateway", "aria-label": "Process or server the new log view follows", value: "gateway" });
  const newObserver = (type, context, options, view) => async () => {
    try {
      const s = await api("POST", "/sessions", { type, context, options });
      location.hash = "#/" + view + "/" + s.sessionId;
    } catch (e) { say(e.message, true); }
  };
  const target = () => (follow.value.trim() === "gateway" ? { serverId: "gateway" } : { processId: follow.value.trim() });
  const observers = el("div", { class: "toolbar", role: "group", "aria-label": "New observer" }, follow,
    el("button", { type: "button", onclick: () => newObserver("debug-stream", target(), { batch: true, lines: 200 }, "log")() }, "Follow its log"),
    el("button", { type: "button", onclick: () => newObserver("network-stream", { serverId: follow.value.trim() || "gateway" }, undefined, "net")() }, "Watch its connections"));
  const form = el("form", { class: "toolbar", onsubmit: async (ev) => {
    ev.preventDefault();
    try {
      localStorage.setItem("nexus.project", newProject.value.trim());
      const s = await api("POST", "/sessions", { type: "terminal", context: { projectId: newProject.value.trim() } });
      location.hash = "#/terminal/" + s.sessionId;
    } catch (e) { say(e.message, true); }
  } }, newProject, newTerm, newBackend, newChat);
  const filtersBar = el("div", { class: "toolbar", role: "group", "aria-label": "Filters" },
    el("label", { for: "f-type" }, "Type", typeSel), el("label", { for: "f-status" }, "Status", statusSel), el("label", { for: "f-project" }, "Context", projectIn));
  const table = el("table", { "aria-label": "Sessions" },
    el("thead", {}, el("tr", {}, ...["Session", "Type", "Status", "Chat or context", "Model", "Title", "Age", "Last activity", "Actions"].map((h, i) => el("th", { scope: "col", class: [4, 6, 7].includes(i) ? "opt" : undefined }, h)))), body);
  // Chats' titles (the chat index's display name, label or task), by chat key, read when a
  // session names a chat not seen yet.
  const titles = new Map();
  let loadingTitles = false;
  const loadTitles = async () => {
    if (loadingTitles || !sessions.some((s) => s.metadata && s.metadata.chatKey && !titles.has(s.metadata.chatKey))) return;
    loadingTitles = true;
    try {
      const { chats } = await api("GET", "/chats");
      for (const c of chats || []) titles.set(c.key, (c.entry && (c.entry.displayName || c.entry.label || c.entry.taskDescription)) || "");
      for (const s of sessions) if (s.metadata && s.metadata.chatKey && !titles.has(s.metadata.chatKey)) titles.set(s.metadata.chatKey, "");
      render();
    } catch (e) { /* titles are a nicety: the table stands without them */ } finally { loadingTitles = false; }
  };
  main.replaceChildren(el("h2", {}, "Sessions"), form, observers, filtersBar, table);

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
      const md = s.metadata || {};
      const ctx = md.chatKey || Object.entries(s.context || {}).map(([k, v]) => k + "=" + v).join(" ");
      const title = md.title || (md.chatKey && titles.get(md.chatKey)) || "";
      const actions = el("td", { class: "actions" });
      const view = { terminal: "terminal", "ai-chat": "chat", "debug-stream": "log", "network-stream": "net", "meta-chat": "feed" }[s.type];
      if (view) actions.append(el("button", { type: "button", "aria-label": "Open " + s.type + " " + shortId(s.sessionId), onclick: () => { location.hash = "#/" + view + "/" + s.sessionId; } }, "Open"));
      const observer = ["debug-stream", "network-stream", "meta-chat"].includes(s.type);
      const cmds = s.status === "active"
        ? [["interrupt", caps.interrupt], ["resume", observer && caps.interrupt], ["pause", caps.pause], ["restart", caps.restart], ["close", caps.close]]
        : s.status === "paused" ? [["resume", true], ["close", caps.close]] : [];
      for (const [cmd, cap] of cmds) {
        if (cap) actions.append(el("button", { type: "button", "aria-label": cmd + " " + s.type + " " + shortId(s.sessionId), onclick: () => control(s.sessionId, cmd) }, cmd));
      }
      return el("tr", { "data-id": s.sessionId },
        // On a node of a cluster, every node's sessions are listed: each names its node.
        el("td", { class: "id", title: s.sessionId + (s.node ? " on node " + s.node : "") }, shortId(s.sessionId), ...(s.node ? [" ", el("span", { class: "node", "aria-label": "node" }, s.node)] : [])),
        el("td", {}, s.type), el("td", { class: "status-" + s.status }, s.status), el("td", {}, ctx),
        el("td", { class: "opt" }, md.model || ""), el("td", {}, title),
        el("td", { class: "opt" }, ago(s.createdAt)), el("td", { class: "opt" }, ago(s.lastActivityAt || s.createdAt)), actions);
    }));
    if (!rows.length) body.append(el("tr", {}, el("td", { colspan: 9 }, "No sessions match.")));
  }

  // One WebSocket; a snapshot after every change. It reconnects on its own.
  let ws, closed = false, delay = 250;
  const connect = () => {
    ws = new WebSocket(wsBase + "/v1/sessions/watch");
    ws.onmessage = (m) => { delay = 250; sessions = JSON.parse(m.data).sessions || []; render(); loadTitles(); say("live"); };
    ws.onclose = () => { if (!closed) { say("reconnecting…"); setTimeout(connect, delay); delay = Math.min(delay * 2, 5000); } };
  };
  connect();
  const tick = setInterval(render, 10000); // ages move on
  return () => { closed = true; clearInterval(tick); ws.close(); };
}

// --- the terminal view -------------------------------------------------------------------

// softwareGL says whether the browser's WebGL is drawn by the CPU (SwiftShader, llvmpipe: no
// GPU), where xterm.js's WebGL renderer is an order of magnitude slower than its DOM renderer.
function softwareGL() {
  try {
    const gl = document.createElement("canvas").getContext("webgl2");
    if (!gl) return true;
    const info = gl.getExtension("WEBGL_debug_renderer_info");
    const name = String(gl.getParameter(info ? info.UNMASKED_RENDERER_WEBGL : gl.RENDERER));
    gl.getExtension("WEBGL_lose_context")?.loseContext();
    return /swiftshader|llvmpipe|softpipe|software/i.test(name);
  } catch { return true; }
}

// A terminal session in xterm.js. The stream is opened with ack=client: the gateway writes at
// most a window of frames ahead of what this page has rendered, and the session's program
// waits while the window is full (xterm.js's flow-control guide, with the acknowledgment
// carried to the runtime's own flow control). A dropped connection reconnects after the last
// sequence rendered: the same shell, nothing lost, nothing twice.
//
// With readOnly (a share link's view) it watches: no input, no resize of the session's window,
// and the gateway's acknowledgments, so a slow viewer does not pace the session.
function terminalView(id, readOnly) {
  const term = new Terminal({ scrollback: 10000, cursorBlink: !readOnly, disableStdin: !!readOnly, fontFamily: "ui-monospace, monospace", fontSize: 14 });
  const fit = new FitAddon();
  term.loadAddon(fit);
  const box = el("div", { class: "term", role: "application", "aria-label": "Terminal " + id });
  const conn = el("span", { class: "conn" }, "connecting…");
  const bar = el("div", { class: "toolbar" });
  if (readOnly) bar.append(el("strong", {}, "terminal " + shortId(id) + " (read-only view)"), conn);
  else {
    const shareOut = el("input", { id: "share-url", readonly: true, "aria-label": "Read-only share link", hidden: true, size: 60 });
    bar.append(el("a", { href: "#/sessions" }, "← Sessions"), el("strong", {}, "terminal " + shortId(id)), conn,
      el("button", { type: "button", onclick: async () => {
        try {
          const res = await fetch("/console/share?session=" + encodeURIComponent(id), { method: "POST", credentials: "same-origin" });
          if (!res.ok) {
            const e = await res.json().catch(() => ({}));
            throw new Error("share: " + (e.error && e.error.code ? e.error.code + ": " + e.error.message : "HTTP " + res.status));
          }
          shareOut.value = (await res.json()).url;
          shareOut.hidden = false;
          shareOut.select();
          say("read-only link: anyone with it can watch this terminal for 24 hours, not type");
        } catch (e) { say(e.message, true); }
      } }, "Share read-only"), shareOut);
  }
  main.replaceChildren(el("div", { class: "term-wrap" }, bar, box));
  term.open(box);
  // The GPU draws the cells when the browser has WebGL 2; else (or when the context is lost)
  // xterm.js's DOM renderer does, which costs the page's main thread far more per frame.
  let renderer = "dom";
  // localStorage "nexus.renderer" ("dom" or "webgl") outranks the detection.
  const choice = localStorage.getItem("nexus.renderer");
  try {
    if (choice === "dom" || (choice !== "webgl" && softwareGL())) throw new Error("DOM renderer chosen");
    const gl = new WebglAddon();
    gl.onContextLoss(() => { gl.dispose(); renderer = "dom"; });
    term.loadAddon(gl);
    renderer = "webgl";
  } catch { /* no WebGL 2: the DOM renderer stays */ }
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
  // Acknowledgments go per half window (the gateway's window is 256 KiB), or 16 ms after the
  // last output: a message per frame would cost the page as much as the frame.
  let unacked = 0;
  const flushAck = () => { clearTimeout(ackTimer); ackTimer = null; unacked = 0; send({ op: "ack", seq: acked }); };
  const ack = (seq, bytes) => {
    if (readOnly) return;
    acked = Math.max(acked, seq);
    unacked += bytes;
    if (unacked >= 128 << 10) flushAck();
    else if (!ackTimer) ackTimer = setTimeout(flushAck, 16);
  };

  // Output goes to xterm.js at once while it trickles, so a keystroke's echo is drawn on the
  // next frame. In a flood (more than 64 KiB in 100 ms) it is gathered and written every
  // flushMs or 1 MiB: xterm.js parses what it is given for 12 ms before it yields to draw, so
  // it draws a few times per batch instead of at every animation frame.
  // The gateway is acknowledged as output arrives while the page holds at most `budget` bytes
  // not yet parsed, and as xterm.js parses beyond that: the batching does not stall the
  // gateway's window, and the page's memory stays bounded.
  const budget = 2 << 20, flushMs = 40, flushBytes = 1 << 20, floodBytes = 64 << 10;
  let unparsed = 0, heldSeq = 0;
  let batch = [], batchBytes = 0, batchSeq = 0, batchTimer = null, rateStart = 0, rateBytes = 0;
  const parsed = (seq, n) => {
    unparsed -= n;
    if (heldSeq && unparsed <= budget) {
      const s = heldSeq;
      heldSeq = 0;
      ack(s, 128 << 10); // at once
    }
  };
  const flushBatch = () => {
    batchTimer = null;
    const seq = batchSeq, n = batchBytes;
    for (let i = 0; i < batch.length - 1; i++) term.write(batch[i]);
    term.write(batch[batch.length - 1], () => parsed(seq, n));
    batch = []; batchBytes = 0;
  };
  const output = (seq, bytes) => {
    const now = performance.now();
    if (now - rateStart > 100) { rateStart = now; rateBytes = 0; }
    rateBytes += bytes.length;
    unparsed += bytes.length;
    if (unparsed <= budget) ack(seq, bytes.length);
    else heldSeq = seq;
    if (!batch.length && rateBytes < floodBytes) {
      term.write(bytes, () => parsed(seq, bytes.length));
      return;
    }
    batch.push(bytes);
    batchBytes += bytes.length;
    batchSeq = seq;
    if (batchBytes >= flushBytes) {
      clearTimeout(batchTimer);
      flushBatch();
    } else if (!batchTimer) batchTimer = setTimeout(flushBatch, flushMs);
  };

  const handle = (e) => {
    if (e.seq > 0 && e.seq <= lastSeq) return; // already rendered before a reconnection
    if (e.seq > 0) lastSeq = e.seq;
    const p = e.payload || {};
    if (e.event === "close") { ended = true; conn.textContent = "session closed" + (p.reason ? " (" + p.reason + ")" : ""); }
    if (e.event === "error") say((p.error && p.error.code) + ": " + (p.error && p.error.message), true);
    if (e.seq > 0) {
      if (heldSeq) heldSeq = e.seq; // over budget: acknowledged once the output before it is parsed
      else ack(e.seq, 0);
    }
  };
  const connect = () => {
    ws = new WebSocket(wsBase + "/v1/sessions/" + encodeURIComponent(id) + "/stream?contentType=raw&binary=true&merge=true" + (readOnly ? "" : "&ack=client") + "&after=" + lastSeq);
    ws.binaryType = "arraybuffer";
    ws.onopen = () => {
      delay = 100;
      conn.textContent = "connected";
      if (readOnly) return;
      send({ op: "resize", width: term.cols, height: term.rows });
      if (acked) send({ op: "ack", seq: acked });
      while (outbox.length) send(outbox.shift());
    };
    ws.onmessage = (m) => {
      if (typeof m.data === "string") { handle(JSON.parse(m.data)); return; }
      // Terminal output: the event's seq, then its bytes, for xterm.js.
      const seq = Number(new DataView(m.data).getBigUint64(0));
      if (seq <= lastSeq) return; // already rendered before a reconnection
      lastSeq = seq;
      output(seq, new Uint8Array(m.data, 8));
    };
    ws.onclose = () => {
      if (closed || ended) return;
      conn.textContent = "reconnecting…";
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 3000);
    };
  };
  connect();
  if (!readOnly) {
    term.onData((d) => input({ op: "send", data: d }));
    term.onBinary((d) => input({ op: "send", data: btoa(d), encoding: "base64" }));
    term.onResize(({ cols, rows }) => send({ op: "resize", width: cols, height: rows }));
  }
  const onResize = () => fit.fit();
  window.addEventListener("resize", onResize);
  // For the end-to-end tests: cut the connection as a network would.
  window.nexusConsole = { dropConnection: () => ws && ws.close(), lastSeq: () => lastSeq, term, renderer: () => renderer };
  return () => { closed = true; clearTimeout(batchTimer); clearTimeout(ackTimer); window.removeEventListener("resize", onResize); if (ws) ws.close(); term.dispose(); };
}

// followStream reads a stream of events (a session's or a shell's) over a WebSocket, passing
// each new one to onEvent; when the connection drops it reconnects with after= the last seq it
// had, so nothing is missed or repeated. A normal close (the stream ended) is final. It
// returns the function that stops it.
function followStream(path, conn, onEvent) { return followStreamFrom(path, conn, onEvent, 0); }

// followStreamFrom is followStream starting after seq start.
function followStreamFrom(path, conn, onEvent, start) {
  let ws, closed = false, lastSeq = start, delay = 100;
  const connect = () => {
    ws = new WebSocket(wsBase + path + (path.includes("?") ? "&" : "?") + "after=" + lastSeq);
    ws.onopen = () => { delay = 100; conn.textContent = "live"; };
    ws.onmessage = (m) => {
      const e = JSON.parse(m.data);
      if (e.seq > 0 && e.seq <= lastSeq) return;
      if (e.seq > 0) lastSeq = e.seq;
      onEvent(e);
    };
    ws.onclose = (ev) => {
      if (closed) return;
      if (ev.code === 1000) { conn.textContent = "ended"; return; }
      conn.textContent = "reconnecting…";
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 3000);
    };
  };
  connect();
  return () => { closed = true; ws.close(); };
}

// --- observers: a debug stream's log, a network stream's connections, a meta-chat's feed -----

// An observer session's events, read over its stream (resuming after the last seq on a
// reconnection), rendered by kind: a log with filter and follow, a live table of connections,
// or a roadmap's activity feed.
function observerView(kind, id) {
  const title = { log: "Log", net: "Connections", feed: "Roadmap activity" }[kind];
  const conn = el("span", { class: "conn" }, "connecting…");
  const filter = el("input", { id: "o-filter", placeholder: "filter", "aria-label": "Filter lines" });
  const followBox = el("input", { id: "o-follow", type: "checkbox", checked: true });
  const bar = el("div", { class: "toolbar" }, el("a", { href: "#/sessions" }, "← Sessions"), el("strong", {}, title + " " + shortId(id)), conn);
  if (kind === "log") bar.append(el("label", { for: "o-filter" }, "Filter", filter), el("label", { for: "o-follow", class: "inline" }, followBox, " follow"));
  const list = el("ol", { class: "log", "aria-label": title, "aria-live": "off" });
  const tbody = el("tbody");
  const summary = el("p", { class: "conn" });
  const table = el("table", { "aria-label": "Connections" }, el("thead", {}, el("tr", {}, ...["State", "Local", "Remote", "Sent", "Received", "RTT ms"].map((h) => el("th", { scope: "col" }, h)))), tbody);
  // A meta-chat's roadmap: its items, kept from the feed's item events (the items there at the
  // start, then each change), beside the feed.
  const items = new Map();
  const itemList = el("ul", { class: "items", "aria-label": "Roadmap items" });
  const renderItems = () => itemList.replaceChildren(...[...items.values()].map((it) =>
    el("li", { class: "item-" + it.status }, el("span", { class: "badge" }, it.status), " " + it.title)));
  if (kind === "feed") main.replaceChildren(bar, el("h3", {}, "Items"), itemList, el("h3", {}, "Activity"), list);
  else main.replaceChildren(bar, kind === "net" ? el("div", {}, summary, table) : list);
  const conns = new Map();
  const max = 5000; // lines kept in the page
  const matches = (text) => { const f = filter.value; return !f || text.toLowerCase().includes(f.toLowerCase()); };
  filter.addEventListener("input", () => { for (const li of list.children) li.hidden = !matches(li.textContent); });
  const addLine = (text, cls) => {
    const li = el("li", { class: cls }, text);
    li.hidden = !matches(text);
    list.append(li);
    while (list.children.length > max) list.firstChild.remove();
    if (followBox.checked) li.scrollIntoView({ block: "end" });
  };
  const renderConns = () => {
    tbody.replaceChildren(...[...conns.values()].map((c) => el("tr", {}, el("td", {}, c.state), el("td", {}, c.local), el("td", {}, c.remote),
      el("td", {}, String(c.bytesSent)), el("td", {}, String(c.bytesReceived)), el("td", {}, (c.rttMs || 0).toFixed(2)))));
  };
  const handle = (e) => {
    const p = e.payload || {};
    const text = (l) => (l.level ? l.level + " " : "") + l.line;
    if (e.event === "data" && p.type === "log-lines") for (const l of p.lines) addLine(text(l), l.stream);
    else if (e.event === "data" && p.type === "log-line") addLine(text(p), p.stream);
    else if (e.event === "data" && p.type === "connection") {
      const k = p.local + " " + p.remote;
      if (p.action === "close") conns.delete(k); else conns.set(k, p);
      renderConns();
    } else if (e.event === "data") {
      if (p.type === "roadmap-item" && p.item) { items.set(p.item.id, p.item); renderItems(); }
      addLine(feedText(p), "feed");
    }
    else if (e.event === "metadata" && kind === "net") {
      const m = p.metadata || {};
      if ("established" in m) summary.textContent = `established ${m.established}, time-wait ${m.timeWait || 0}, listening ${m.listening || 0}, accept queue ${m.acceptQueue || 0}`;
    } else if (e.event === "status" && kind !== "net") addLine("— " + (p.message || p.status), "status");
    else if (e.event === "error") say((p.error && p.error.code) + ": " + (p.error && p.error.message), true);
    else if (e.event === "close") conn.textContent = "session closed";
  };
  return followStream("/v1/sessions/" + encodeURIComponent(id) + "/stream", conn, handle);
}

// feedText is one line of a meta-chat's feed.
function feedText(p) {
  switch (p.type) {
    case "roadmap-item": return `item ${p.action}: ${p.item ? p.item.title + " [" + p.item.status + "]" : ""}`;
    case "roadmap-session": return `session ${p.sessionId ? shortId(p.sessionId) : ""} (${p.sessionType || ""}) ${p.action || p.status || ""}`;
    case "roadmap-turn": return `turn of ${p.chatKey || p.sessionId}: ${p.end || ""} after ${p.iterations || 0} iterations`;
    case "roadmap-subagent": return `subagent ${p.label || p.childSessionKey || ""}: ${p.task || ""}`;
  }
  return JSON.stringify(p);
}

// --- chats: a live ai-chat session --------------------------------------------------------

// chatView is an ai-chat session: its conversation so far (the transcript's context, from
// /v1/chats), then its turns live: the reply's tokens as they stream, thinking and tool calls
// collapsed, confirmation requests as buttons, subagents, compactions as markers, and a box
// to send a message with its queue mode.
function chatView(id) {
  const conn = el("span", { class: "conn" }, "connecting…");
  const usage = el("span", { class: "meta" });
  const list = el("ol", { class: "chat", "aria-label": "Conversation" });
  const text = el("textarea", { id: "chat-input", rows: 3, "aria-label": "Message", placeholder: "Message (Ctrl+Enter sends)" });
  const mode = el("select", { id: "chat-mode", "aria-label": "Queue mode" },
    ...["followup", "steer", "collect", "queue", "interrupt", "steer-backlog", "reject", "rollback"].map((m) => el("option", { value: m }, m)));
  const send = async () => {
    const data = text.value.trim();
    if (!data) return;
    const mine = bubble("user", data); // shown at once, before the events it causes
    try {
      await api("POST", "/sessions/" + encodeURIComponent(id) + "/send", { data, mode: mode.value });
      text.value = "";
    } catch (e) { mine.remove(); say(e.message, true); }
  };
  text.addEventListener("keydown", (ev) => { if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) { ev.preventDefault(); send(); } });
  const form = el("form", { class: "toolbar chat-send", onsubmit: (ev) => { ev.preventDefault(); send(); } }, text, el("label", { for: "chat-mode" }, "Mode", mode), el("button", { type: "submit" }, "Send"));
  const tree = el("ol", { class: "tree", "aria-label": "Branch tree" });
  const subagents = el("ul", { class: "items", "aria-label": "Subagents" });
  const side = el("aside", { class: "chat-side" },
    el("details", {}, el("summary", {}, "Branch tree"), tree),
    el("details", { open: true }, el("summary", {}, "Subagents"), subagents));
  main.replaceChildren(el("div", { class: "toolbar" }, el("a", { href: "#/sessions" }, "← Sessions"), el("strong", {}, "ai-chat " + shortId(id)), conn, usage),
    el("div", { class: "chat-wrap" }, el("div", { class: "chat-main" }, list, form), side));
  // The transcript's tree: every entry, indented by depth, the active branch marked.
  const loadTree = async (key) => {
    const t = await api("GET", "/chats/" + encodeURIComponent(key) + "/tree");
    tree.replaceChildren(...(t.entries || []).filter((e) => e.type === "message" || e.label).map((e) =>
      el("li", { class: e.active ? "active" : "", style: "padding-left:" + Math.min(e.depth || 0, 40) * 8 + "px" },
        (e.role || e.type) + (e.label ? " [" + e.label + "]" : "") + ": " + (e.preview || "").slice(0, 80))));
  };
  // The subagent tree: the chat index's entries spawned by this conversation, theirs below
  // them, and so on; plus those this stream announced whose entries are already cleaned up.
  const announced = new Map(); // child chat key -> its ai-subagent payload
  const loadSubagents = async () => {
    if (!chatKey) return;
    const [{ chats }, { sessions }] = await Promise.all([api("GET", "/chats"), api("GET", "/sessions?all=true&type=ai-chat")]);
    const kids = new Map(), known = new Set();
    for (const c of chats || []) {
      const parent = c.entry && c.entry.spawnedBy;
      if (!parent) continue;
      known.add(c.key);
      if (!kids.has(parent)) kids.set(parent, []);
      kids.get(parent).push({ key: c.key, label: c.entry.label || (announced.get(c.key) || {}).label, task: c.entry.taskDescription, status: c.entry.taskStatus });
    }
    for (const [key, p] of announced) {
      if (known.has(key)) continue;
      if (!kids.has(chatKey)) kids.set(chatKey, []);
      kids.get(chatKey).push({ key, label: p.label, task: p.task, status: "done", sessionId: p.sessionId });
    }
    const sessionOf = new Map((sessions || []).map((x) => [(x.metadata && x.metadata.chatKey) || (x.context && x.context.chatId), x.sessionId]));
    const node = (c, depth, seen) => {
      const sid = c.sessionId || sessionOf.get(c.key);
      const li = el("li", {}, el("span", { class: "badge" }, c.label || "subagent"), " " + (c.task || ""), c.status ? el("span", { class: "meta" }, " (" + c.status + ")") : "",
        sid ? el("a", { href: "#/chat/" + sid, "aria-label": "Open subagent " + (c.label || c.task || "") }, " open") : "");
      const below = seen.has(c.key) || depth > 8 ? [] : kids.get(c.key) || [];
      if (below.length) li.append(el("ul", { class: "items" }, ...below.map((k) => node(k, depth + 1, new Set([...seen, c.key])))));
      return li;
    };
    subagents.replaceChildren(...(kids.get(chatKey) || []).map((c) => node(c, 0, new Set([chatKey]))));
  };
  let subagentsTimer = null;
  const refreshSubagents = () => {
    if (!subagentsTimer) subagentsTimer = setTimeout(() => { subagentsTimer = null; loadSubagents().catch((e) => say(e.message, true)); }, 50);
  };
  const addSubagent = (p) => { announced.set(p.childSessionKey, p); refreshSubagents(); };
  const bubble = (role, body) => {
    const li = el("li", { class: "msg role-" + role }, el("div", { class: "meta" }, role));
    if (body) li.append(el("div", { class: "text" }, body));
    list.append(li);
    li.scrollIntoView({ block: "end" });
    return li;
  };
  const marker = (t) => list.append(el("li", { class: "marker" }, t));
  const tool = (li, name, args, out, isError) => {
    const d = el("details", { class: "tool" }, el("summary", {}, name + (isError ? " (error)" : "")));
    if (args) d.append(el("pre", {}, typeof args === "string" ? args : JSON.stringify(args)));
    if (out !== undefined) d.append(el("pre", { class: "result" }, out));
    li.append(d);
    return d;
  };
  // The conversation so far: the transcript's messages as pi stores them.
  const history = (m) => {
    if (m.role === "user") {
      const t = typeof m.content === "string" ? m.content : (m.content || []).filter((c) => c.type === "text").map((c) => c.text).join("\n");
      bubble("user", t);
    } else if (m.role === "assistant") {
      const li = bubble("assistant");
      for (const c of m.content || []) {
        if (c.type === "text") li.append(el("div", { class: "text" }, c.text));
        else if (c.type === "thinking") li.append(el("details", {}, el("summary", {}, "thinking"), el("div", { class: "text" }, c.thinking || "")));
        else if (c.type === "toolCall") tool(li, c.name, c.arguments);
      }
    } else if (m.role === "toolResult") {
      const li = bubble("tool");
      tool(li, m.toolName || "result", null, (m.content || []).map((c) => c.text || "").join(""), m.isError);
    } else if (m.role === "compactionSummary" || m.role === "branchSummary") {
      marker((m.role === "compactionSummary" ? "— compacted: " : "— branch summary: ") + (m.summary || "").slice(0, 200));
    }
  };
  // Live: a reply's text blocks by messageId, tool calls by id.
  const replies = new Map(), calls = new Map();
  let current = null;
  const live = (e) => {
    const p = e.payload || {};
    if (e.event === "metadata" && p.metadata && "tokenCount" in p.metadata) usage.textContent = `context ${p.metadata.tokenCount} / ${p.metadata.contextWindow} tokens`;
    if (e.event === "error") say((p.error && p.error.code) + ": " + (p.error && p.error.message), true);
    if (e.event !== "data") return;
    switch (p.type) {
      case "ai-turn": if (p.phase === "started") { current = null; replies.clear(); } if (p.phase === "ended") { marker(`— turn ${p.end || ""}${p.usage ? ", " + p.usage.total + " tokens" : ""}`); if (chatKey) loadTree(chatKey).catch(() => {}); refreshSubagents(); } break;
      case "ai-token": {
        let b = replies.get(p.messageId);
        if (!b) { current = bubble("assistant"); b = el("div", { class: "text" }); current.append(b); replies.set(p.messageId, b); }
        b.textContent += p.content || "";
        break;
      }
      case "ai-reasoning": if (p.phase === "delta") { const li = current || bubble("assistant"); let d = li.querySelector("details.thinking"); if (!d) { d = el("details", { class: "thinking" }, el("summary", {}, "thinking"), el("div", { class: "text" })); li.append(d); } d.lastChild.textContent += p.content || ""; } break;
      case "ai-tool":
        if (p.phase === "detected") { current = current || bubble("assistant"); calls.set(p.toolCallId, tool(current, p.name, p.arguments)); }
        else if (p.phase === "completed") { const d = calls.get(p.toolCallId) || tool(bubble("tool"), p.name); d.append(el("pre", { class: "result" }, p.output || "")); if (p.isError) d.firstChild.textContent += " (error)"; current = null; replies.clear(); }
        break;
      case "confirmation-request": {
        const li = bubble("confirm", `${p.tool} wants to run${p.command ? ": " + p.command : ""}${p.reason ? " (" + p.reason + ")" : ""}`);
        const buttons = el("div", { class: "toolbar", role: "group", "aria-label": "Answer" });
        for (const answer of p.options || ["allow-once", "deny"]) {
          buttons.append(el("button", { type: "button", onclick: async () => {
            try { await api("POST", "/sessions/" + encodeURIComponent(id) + "/control", { command: "confirm", requestId: p.requestId, answer }); buttons.replaceChildren(el("span", { class: "meta" }, answer)); } catch (err) { say(err.message, true); }
          } }, answer));
        }
        li.append(buttons);
        break;
      }
      case "ai-subagent": marker(`— subagent ${p.label || ""} started: ${p.task || ""}`); addSubagent(p); break;
      case "ai-compaction":
        if (p.phase === "ended") marker(`— compacted: ${p.tokensBefore} → ${p.tokensAfter} tokens`);
        else if (p.phase === "skipped" || p.phase === "memory-flush") marker(`— ${p.message}`);
        break;
      case "ai-queue":
        if (p.phase === "queued") marker(`— queued (${p.mode})`);
        else if (p.phase === "rolled-back") marker(`— ${p.reason}`);
        break;
    }
  };
  let stop = () => {};
  let chatKey = "";
  (async () => {
    try {
      const s = await api("GET", "/sessions/" + encodeURIComponent(id));
      const key = s.metadata && s.metadata.chatKey;
      chatKey = key || "";
      if (key) { loadTree(key).catch(() => {}); refreshSubagents(); }
      // Where the stream starts: after what the session has published so far (the history has it).
      const now = await api("GET", "/sessions/" + encodeURIComponent(id) + "/events?after=18446744073709551615&limit=1");
      if (key) {
        const res = await fetch("/v1/chats/" + encodeURIComponent(key) + "/history", { credentials: "same-origin" });
        for (const line of (await res.text()).split("\n")) {
          if (!line) continue;
          const o = JSON.parse(line);
          if (o.message) history(o.message);
        }
      }
      stop = followStreamFrom("/v1/sessions/" + encodeURIComponent(id) + "/stream", conn, live, now.next || 0);
    } catch (e) { say(e.message, true); }
  })();
  return () => stop();
}

// --- agent shells: their audit logs as transcripts -------------------------------------

function shellsView() {
  const body = el("tbody");
  const idIn = el("input", { id: "shell-id", placeholder: "shell id", "aria-label": "Open a shell's audit log by id" });
  main.replaceChildren(el("h2", {}, "Agent shells"),
    el("form", { class: "toolbar", onsubmit: (ev) => { ev.preventDefault(); location.hash = "#/shell/" + encodeURIComponent(idIn.value.trim()); } }, idIn, el("button", { type: "submit" }, "Open")),
    el("table", { "aria-label": "Agent shells" }, el("thead", {}, el("tr", {}, ...["Shell", "State", "Transport", "Directory", "Commands", "Last activity"].map((h) => el("th", { scope: "col" }, h)))), body));
  // The open shells (session_list), then every other shell whose audit log the gateway has.
  const load = () => api("GET", "/shells?logs=100").then((r) => {
    const open = new Map((r.sessions || []).map((s) => [s.session_id, s]));
    const rows = [...open.values()].map((s) => ({ id: s.session_id, state: "open", transport: s.transport, cwd: s.cwd, execs: s.execs, when: s.last_used }));
    for (const l of r.logs || []) if (!open.has(l.session_id)) rows.push({ id: l.session_id, state: "log", when: l.modified });
    body.replaceChildren(...rows.map((s) => el("tr", {},
      el("td", {}, el("a", { href: "#/shell/" + encodeURIComponent(s.id) }, s.id)), el("td", {}, s.state), el("td", {}, s.transport || ""),
      el("td", {}, s.cwd || ""), el("td", {}, s.execs === undefined ? "" : String(s.execs)), el("td", {}, s.when ? ago(s.when) : ""))));
    if (!rows.length) body.append(el("tr", {}, el("td", { colspan: 6 }, "No agent shell has run here yet.")));
  }).catch((e) => say(e.message, true));
  load();
  const tick = setInterval(load, 5000);
  return () => clearInterval(tick);
}

// shellView is one agent shell's audit log as a transcript, live: `cwd $ command`, its stdout
// and stderr apart, the exit code and duration, blocks, checkpoints, the open and the close.
function shellView(id) {
  const conn = el("span", { class: "conn" }, "connecting…");
  const list = el("ol", { class: "shell", "aria-label": "Transcript of " + id });
  main.replaceChildren(el("div", { class: "toolbar" }, el("a", { href: "#/shells" }, "← Agent shells"), el("strong", {}, id), conn), list);
  const add = (...nodes) => { const li = el("li", {}, ...nodes); list.append(li); li.scrollIntoView({ block: "end" }); };
  const record = (r) => {
    switch (r.event) {
      case "open": add(el("div", { class: "meta" }, `[opened ${r.transport || ""}] ${r.workspace || r.cwd || ""}`)); break;
      case "exec": {
        const tail = [`→ exit ${r.exit_code === undefined ? "?" : r.exit_code} (${r.duration_ms || 0} ms)`];
        if (r.timed_out) tail.push("[timed out]");
        if (r.truncated) tail.push("[truncated]");
        add(el("div", { class: "cmd" }, el("span", { class: "meta" }, (r.cwd || "") + " $ "), r.command || ""),
          r.stdout ? el("pre", { class: "stdout", "aria-label": "stdout" }, r.stdout) : "",
          r.stderr ? el("pre", { class: "stderr", "aria-label": "stderr" }, r.stderr) : "",
          el("div", { class: r.exit_code ? "exit fail" : "exit" }, tail.join(" ")));
        break;
      }
      case "block": add(el("div", { class: "exit fail" }, `✗ blocked: ${r.command || ""}${r.reason ? " (" + r.reason + ")" : ""}`)); break;
      case "checkpoint": case "restore": add(el("div", { class: "meta" }, `[${r.event} ${r.checkpoint_id || ""}]`)); break;
      case "close": add(el("div", { class: "meta" }, `[closed${r.reason ? " " + r.reason : ""}]`)); break;
      default: add(el("div", { class: "meta" }, JSON.stringify(r)));
    }
  };
  return followStream("/v1/shells/" + encodeURIComponent(id) + "/stream", conn, (e) => {
    if (e.event === "audit" && e.payload && e.payload.record) record(e.payload.record);
    else if (e.event === "error") say((e.payload.error && e.payload.error.code) + ": " + (e.payload.error && e.payload.error.message), true);
  });
}

// --- search: the history index, and a conversation from it -----------------------------

// highlight turns the index's match marks (U+E000 … U+E001) into <mark> elements.
function highlight(text) {
  const out = [];
  for (const [i, part] of text.split(/[\uE000\uE001]/).entries()) out.push(i % 2 ? el("mark", {}, part) : part);
  return out;
}

function searchView(query) {
  const q = el("input", { id: "q", type: "search", value: query, placeholder: "words, \"a phrase\", tool:bash …", "aria-label": "Search every agent's history" });
  const results = el("ol", { class: "hits", "aria-label": "Results" });
  const form = el("form", { class: "toolbar", role: "search", onsubmit: (ev) => { ev.preventDefault(); location.hash = "#/search?q=" + encodeURIComponent(q.value); } },
    q, el("button", { type: "submit" }, "Search"));
  main.replaceChildren(el("h2", {}, "Search"), form, results);
  q.focus();
  if (query) {
    say("searching…");
    api("GET", "/index/search?limit=50&q=" + encodeURIComponent(query)).then((r) => {
      say(r.hits.length + " results");
      results.replaceChildren(...r.hits.map((h) => el("li", {},
        el("a", { href: "#/history/" + encodeURIComponent(h.source) + "/" + encodeURIComponent(h.session) + (h.message_id ? "?around=" + encodeURIComponent(h.message_id) : "") },
          (h.title || h.session.slice(0, 8)) + (h.project ? " — " + h.project : "")),
        el("span", { class: "meta" }, ` ${h.source} · ${h.role}${h.tool ? " · " + h.tool : ""}${h.timestamp ? " · " + h.timestamp : ""}`),
        el("p", {}, ...highlight(h.snippet)))));
      if (!r.hits.length) results.append(el("li", {}, "Nothing found."));
    }).catch((e) => say(e.message, true));
  }
  return () => {};
}

// historyView shows one conversation of the history index: its messages, thinking and tool
// calls collapsed, token usage, the message a search hit named in view.
function historyView(source, id, around) {
  const list = el("ol", { class: "chat", "aria-label": "Messages" });
  const head = el("div", {});
  main.replaceChildren(el("div", { class: "toolbar" }, el("a", { href: "#/search" }, "← Search")), head, list);
  api("GET", "/index/sessions/" + encodeURIComponent(id) + "?source=" + encodeURIComponent(source)).then((r) => {
    const s = r.session;
    const t = s.tokens || {};
    head.replaceChildren(el("h2", {}, s.title || s.id), el("p", { class: "meta" },
      `${s.source}${s.project ? " · " + s.project : ""}${s.model ? " · " + s.model : ""} · ${s.messages} messages, ${s.turns} turns · tokens in ${t.input || 0}, out ${t.output || 0}${s.resume ? " · resume: " : ""}`,
      s.resume ? el("code", {}, s.resume) : ""));
    list.replaceChildren(...r.messages.map((m) => {
      const li = el("li", { class: "msg role-" + m.role, id: "m-" + m.id, "aria-current": m.id === around ? "true" : undefined },
        el("div", { class: "meta" }, m.role + (m.timestamp ? " · " + m.timestamp : "") + (m.model ? " · " + m.model : "") + (m.tokens ? ` · ${m.tokens.input}/${m.tokens.output} tokens` : "")));
      if (m.role === "thinking" || m.role === "reasoning") li.append(el("details", {}, el("summary", {}, "thinking"), el("div", { class: "text" }, m.text)));
      else if (m.text) li.append(el("div", { class: "text" }, m.text));
      for (const c of m.tool_calls || []) {
        li.append(el("details", { class: "tool" }, el("summary", {}, `${c.name} (${c.status})`),
          c.params ? el("pre", {}, c.params) : "", c.result ? el("pre", { class: "result" }, c.result) : ""));
      }
      return li;
    }));
    const target = around && document.getElementById("m-" + around);
    if (target) target.scrollIntoView({ block: "center" });
  }).catch((e) => say(e.message, true));
  return () => {};
}

// --- routing -----------------------------------------------------------------------------

function route() {
  leave();
  say("");
  const h = location.hash || "#/sessions";
  const m = h.match(/^#\/(terminal|view|log|net|feed|chat)\/([\w-]+)$/);
  const search = h.match(/^#\/search(?:\?q=(.*))?$/);
  const hist = h.match(/^#\/history\/([^/]+)\/([^?]+)(?:\?around=(.*))?$/);
  const shell = h.match(/^#\/shell\/(.+)$/);
  if (m && m[1] === "terminal") leave = terminalView(m[2]);
  else if (m && m[1] === "view") leave = terminalView(m[2], true);
  else if (m && m[1] === "chat") leave = chatView(m[2]);
  else if (m) leave = observerView(m[1], m[2]);
  else if (search) leave = searchView(decodeURIComponent(search[1] || ""));
  else if (h === "#/shells") leave = shellsView();
  else if (shell) leave = shellView(decodeURIComponent(shell[1]));
  else if (hist) leave = historyView(decodeURIComponent(hist[1]), decodeURIComponent(hist[2]), hist[3] && decodeURIComponent(hist[3]));
  else leave = sessionsView();
  if (!(m && (m[1] === "terminal" || m[1] === "view")) && !search) main.focus({ preventScroll: true });
}
window.addEventListener("hashchange", route);
route();
