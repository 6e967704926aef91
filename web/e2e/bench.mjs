// The web console's benchmarks in a real headless Chromium (bench/console runs it):
//
//   node e2e/bench.mjs SIGNIN_URL PROJECT DATA_FILE YES_SECONDS
//
// - throughput: `cat DATA_FILE` in a console terminal, from Enter to its last line rendered by
//   xterm.js, in MB/s (5 runs in the same terminal, the first of which also fills its
//   scrollback); and the same `cat` read by the page with no xterm.js (the WebSocket alone);
// - keystroke to echo: a character typed into the page (xterm's input path, as a keypress)
//   until xterm has rendered its echo, 300 times, p50 / p95 / max in ms;
// - memory: the page's JS heap after YES_SECONDS of `yes`, Ctrl-C, and a collection.
// It prints one JSON object.
//
// Chromium is driven over its DevTools pipe with only the Page and Runtime domains (cdp.mjs),
// not with playwright-core as the end-to-end test is: Playwright enables the Network domain,
// which copies every WebSocket frame to the driver and halved the figures.
import { launch } from "./cdp.mjs";
import { statSync } from "node:fs";

const [signin, project, data, yesSeconds] = process.argv.slice(2);
const browser = await launch(process.env.CHROMIUM || "/usr/bin/chromium", ["--window-size=1280,800", "--enable-precise-memory-info", "--js-flags=--expose-gc"]);
const out = { chromium: browser.version };
try {
  const page = await browser.newPage();
  await page.goto(signin);
  await page.evaluate((project) => new Promise((resolve) => {
    const input = document.querySelector("#new-project");
    input.value = project;
    input.form.requestSubmit();
    const wait = () => { const c = document.querySelector(".conn"); if (c && c.textContent === "connected") { document.querySelector(".xterm-helper-textarea").focus(); resolve(); } else setTimeout(wait, 20); };
    wait();
  }), project);
  out.renderer = await page.evaluate(() => window.nexusConsole.renderer());
  // Runs cmd; resolves once a row on the screen is exactly marker and drawn, with the time it
  // took. (The buffer, not the DOM: the WebGL renderer has no DOM rows.)
  const timed = (cmd, marker) => page.evaluate(({ cmd, marker }) => new Promise((resolve) => {
    const term = window.nexusConsole.term;
    const rows = () => {
      const b = term.buffer.active;
      for (let y = 0; y < term.rows; y++) { const l = b.getLine(b.viewportY + y); if (l && l.translateToString(true) === marker) return true; }
      return false;
    };
    const t0 = performance.now();
    const sub = term.onRender(() => {
      if (rows()) { sub.dispose(); resolve(performance.now() - t0); }
    });
    term.input(cmd + "\r");
  }), { cmd, marker });

  await timed("stty -echoctl; echo rea''dy", "ready");
  const bytes = statSync(data).size;
  const runs = [];
  for (let i = 0; i < 5; i++) {
    console.error("bench: cat, run " + (i + 1));
    const ms = await timed(`cat ${data}; echo EN''D${i}`, "END" + i);
    runs.push(bytes / 1e6 / (ms / 1000));
  }
  out.throughputMBps = runs.map((r) => Math.round(r * 10) / 10);
  out.throughputMedian = [...out.throughputMBps].sort((a, b) => a - b)[2];
  out.bytes = bytes;
  // The page with no xterm.js: a second terminal's stream, opened as the console opens it
  // (binary, merged, acknowledged per 128 KiB as received), counted until the marker.
  out.wsAloneMBps = [];
  console.error("bench: the WebSocket alone");
  for (let i = 0; i < 3; i++) {
    out.wsAloneMBps.push(await page.evaluate(async ({ project, data }) => {
      const s = await (await fetch("/v1/sessions", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ type: "terminal", context: { projectId: project } }) })).json();
      const ws = new WebSocket("ws://" + location.host + "/v1/sessions/" + s.sessionId + "/stream?contentType=raw&binary=true&merge=true&ack=client");
      ws.binaryType = "arraybuffer";
      await new Promise((r) => { ws.onopen = r; });
      ws.send(JSON.stringify({ op: "send", data: `stty -echo; sleep 0.3; cat ${data}; echo EN''D\r` }));
      let bytes = 0, unacked = 0, t0 = 0, tail = "";
      const mbps = await new Promise((resolve) => {
        ws.onmessage = (m) => {
          if (typeof m.data === "string") return;
          if (!t0) t0 = performance.now();
          bytes += m.data.byteLength - 8;
          if ((unacked += m.data.byteLength) >= 128 << 10) { unacked = 0; ws.send(JSON.stringify({ op: "ack", seq: Number(new DataView(m.data).getBigUint64(0)) })); }
          tail = (tail + new TextDecoder().decode(new Uint8Array(m.data, Math.max(8, m.data.byteLength - 128)))).slice(-256);
          if (tail.includes("END")) resolve(bytes / 1e3 / (performance.now() - t0));
        };
      });
      ws.close();
      await fetch("/v1/sessions/" + s.sessionId + "/control", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ command: "close" }) });
      return Math.round(mbps * 10) / 10;
    }, { project, data }));
  }
  // The ceiling: the same page's xterm.js fed 10 MB of such lines from memory, in 4 KB writes
  // (what a PTY read gives), with nexus out of the path.
  out.xtermAloneMBps = await page.evaluate(() => new Promise((resolve) => {
    const term = window.nexusConsole.term;
    const chunk = new TextEncoder().encode("0000000 abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghija\r\n".repeat(51));
    const total = Math.ceil(10e6 / chunk.length);
    const t0 = performance.now();
    let n = 0;
    for (let i = 0; i < total; i++) term.write(chunk, () => { if (++n === total) resolve(Math.round(chunk.length * total / 1e5 / ((performance.now() - t0) / 1000)) / 10); });
  }));
  await timed("clear; echo clea''red", "cleared");

  // Keystroke to echo: each character typed at the prompt, until xterm has drawn it.
  out.echoMs = await page.evaluate(() => new Promise((resolve) => {
    const term = window.nexusConsole.term;
    const samples = [];
    let n = 0;
    const one = () => {
      if (n === 300) { term.input("\x15"); resolve(samples); return; }
      if (n % 60 === 0 && n > 0) term.input("\x15"); // Ctrl-U: keep the line short
      const before = term.buffer.active.cursorX;
      const t0 = performance.now();
      const sub = term.onRender(() => {
        if (term.buffer.active.cursorX !== before) {
          sub.dispose();
          samples.push(performance.now() - t0);
          n++;
          setTimeout(one, 5);
        }
      });
      term.input("x");
    };
    setTimeout(one, 200);
  }));
  const sorted = [...out.echoMs].sort((a, b) => a - b);
  const q = (p) => Math.round(sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] * 100) / 100;
  out.echo = { p50: q(0.5), p95: q(0.95), max: q(1), n: sorted.length };
  delete out.echoMs;

  // A flood of yes, then Ctrl-C: the page's memory, and how long the prompt takes to return.
  await page.evaluate(() => window.nexusConsole.term.input("yes\r"));
  await new Promise((r) => setTimeout(r, Number(yesSeconds) * 1000));
  const heapDuring = await page.evaluate(() => performance.memory.usedJSHeapSize);
  out.ctrlCToPromptMs = await page.evaluate(() => new Promise((resolve) => {
    const term = window.nexusConsole.term;
    const t0 = performance.now();
    term.input("\x03");
    setTimeout(() => term.input("echo ba''ck\r"), 0);
    const sub = term.onRender(() => {
      const b = term.buffer.active;
      for (let y = 0; y < term.rows; y++) { const l = b.getLine(b.viewportY + y); if (l && l.translateToString(true) === "back") { sub.dispose(); resolve(Math.round(performance.now() - t0)); return; } }
    });
  }));
  const heapAfter = await page.evaluate(() => { window.gc(); return performance.memory.usedJSHeapSize; });
  out.yesSeconds = Number(yesSeconds);
  out.heapMB = { during: Math.round(heapDuring / 1e5) / 10, afterGC: Math.round(heapAfter / 1e5) / 10 };
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
