// The web console's benchmarks in a real headless Chromium (bench/console runs it):
//
//   node e2e/bench.mjs SIGNIN_URL PROJECT DATA_FILE YES_SECONDS
//
// - throughput: `cat DATA_FILE` in a console terminal, from Enter to its last line rendered by
//   xterm.js, in MB/s (3 runs);
// - keystroke to echo: a character typed into the page (xterm's input path, as a keypress)
//   until xterm has rendered its echo, 300 times, p50 / p95 / max in ms;
// - memory: the page's JS heap after YES_SECONDS of `yes`, Ctrl-C, and a collection.
// It prints one JSON object.
import { chromium } from "playwright-core";
import { statSync } from "node:fs";

const [signin, project, data, yesSeconds] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--enable-precise-memory-info", "--js-flags=--expose-gc"],
});
const out = { chromium: browser.version() };
try {
  const page = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage();
  page.setDefaultTimeout(120000);
  await page.goto(signin);
  await page.fill("#new-project", project);
  await page.click("text=New terminal");
  await page.waitForFunction(() => document.querySelector(".conn") && document.querySelector(".conn").textContent === "connected");
  await page.locator(".xterm-helper-textarea").focus();
  // Runs cmd; resolves once a rendered row is exactly marker, with the time it took.
  const timed = (cmd, marker) => page.evaluate(({ cmd, marker }) => new Promise((resolve) => {
    const term = window.nexusConsole.term;
    const rows = () => [...document.querySelectorAll(".xterm-rows > div")].some((d) => d.textContent.trimEnd() === marker);
    const t0 = performance.now();
    const sub = term.onRender(() => {
      if (rows()) { sub.dispose(); resolve(performance.now() - t0); }
    });
    term.input(cmd + "\r");
  }), { cmd, marker });

  await timed("stty -echoctl; echo rea''dy", "ready");
  const bytes = statSync(data).size;
  const runs = [];
  for (let i = 0; i < 3; i++) {
    const ms = await timed(`cat ${data}; echo EN''D${i}`, "END" + i);
    runs.push(bytes / 1e6 / (ms / 1000));
  }
  out.throughputMBps = runs.map((r) => Math.round(r * 10) / 10);
  out.bytes = bytes;
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
  await page.waitForTimeout(Number(yesSeconds) * 1000);
  const heapDuring = await page.evaluate(() => performance.memory.usedJSHeapSize);
  out.ctrlCToPromptMs = await page.evaluate(() => new Promise((resolve) => {
    const term = window.nexusConsole.term;
    const t0 = performance.now();
    term.input("\x03");
    setTimeout(() => term.input("echo ba''ck\r"), 0);
    const sub = term.onRender(() => {
      if ([...document.querySelectorAll(".xterm-rows > div")].some((d) => d.textContent.trimEnd() === "back")) { sub.dispose(); resolve(Math.round(performance.now() - t0)); }
    });
  }));
  const heapAfter = await page.evaluate(() => { window.gc(); return performance.memory.usedJSHeapSize; });
  out.yesSeconds = Number(yesSeconds);
  out.heapMB = { during: Math.round(heapDuring / 1e5) / 10, afterGC: Math.round(heapAfter / 1e5) / 10 };
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
