// A small DevTools-protocol client for the benchmarks: Chromium over --remote-debugging-pipe
// (NUL-separated JSON), with only the domains asked for. Playwright enables the Network
// domain on every page, and Chromium then copies every WebSocket frame to the driver, which
// costs the browser as much as the page's own work on a stream; a user's browser pays none of it.
import { spawn } from "node:child_process";
import { StringDecoder } from "node:string_decoder";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export async function launch(executable, args = []) {
  const dir = mkdtempSync(join(tmpdir(), "nexus-cdp-"));
  const proc = spawn(executable, ["--headless", "--no-sandbox", "--remote-debugging-pipe", "--user-data-dir=" + dir, "--no-first-run", "--no-default-browser-check", ...args, "about:blank"],
    { stdio: ["ignore", "ignore", "pipe", "pipe", "pipe"] });
  proc.stderr.resume();
  const out = proc.stdio[3], inp = proc.stdio[4];
  let id = 0, buf = "";
  const utf8 = new StringDecoder("utf8");
  const waiting = new Map(), listeners = [];
  inp.on("data", (d) => {
    buf += utf8.write(d);
    let i;
    while ((i = buf.indexOf("\0")) >= 0) {
      const msg = JSON.parse(buf.slice(0, i));
      buf = buf.slice(i + 1);
      if (msg.id && waiting.has(msg.id)) {
        const [res, rej] = waiting.get(msg.id);
        waiting.delete(msg.id);
        if (msg.error) rej(new Error(msg.error.message)); else res(msg.result);
      } else for (const l of listeners) l(msg);
    }
  });
  const send = (method, params = {}, sessionId) => new Promise((res, rej) => {
    const m = { id: ++id, method, params };
    if (sessionId) m.sessionId = sessionId;
    waiting.set(m.id, [res, rej]);
    out.write(JSON.stringify(m) + "\0");
  });
  const version = await send("Browser.getVersion");
  return {
    version: version.product,
    on: (fn) => listeners.push(fn),
    async newPage() {
      const { targetId } = await send("Target.createTarget", { url: "about:blank" });
      const { sessionId } = await send("Target.attachToTarget", { targetId, flatten: true });
      await send("Page.enable", {}, sessionId);
      const page = {
        send: (m, p) => send(m, p, sessionId),
        async goto(url) {
          const loaded = new Promise((r) => { const l = (m) => { if (m.sessionId === sessionId && m.method === "Page.loadEventFired") { listeners.splice(listeners.indexOf(l), 1); r(); } }; listeners.push(l); });
          await page.send("Page.navigate", { url });
          await loaded;
        },
        // evaluate runs fn(arg) in the page and returns its (awaited) JSON value.
        async evaluate(fn, arg) {
          const r = await page.send("Runtime.evaluate", { expression: "(" + fn.toString() + ")(" + JSON.stringify(arg) + ")", awaitPromise: true, returnByValue: true });
          if (r.exceptionDetails) throw new Error("page: " + (r.exceptionDetails.exception ? r.exceptionDetails.exception.description : r.exceptionDetails.text));
          return r.result.value;
        },
      };
      return page;
    },
    async close() { try { await send("Browser.close"); } catch { /* gone */ } await new Promise((r) => proc.exitCode !== null ? r() : proc.once("exit", r)); rmSync(dir, { recursive: true, force: true }); },
  };
}
