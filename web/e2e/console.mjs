// End-to-end test of the web console in a real headless Chromium, driven by playwright-core.
// internal/cli's console scripts run it against a real `nexus serve`:
//
//   node e2e/console.mjs SIGNIN_URL PROJECT ARTIFACTS_DIR
//
// It prints one line per check ("ok NAME ..." or "FAIL NAME ...") and exits 1 on a failure;
// screenshots of each view go to ARTIFACTS_DIR.
import { chromium } from "playwright-core";

const [signin, project, artifacts] = process.argv.slice(2);
const origin = new URL(signin).origin;
let failed = false;
const ok = (name, detail = "") => console.log("ok", name, detail);
const fail = (name, detail = "") => { failed = true; console.log("FAIL", name, detail); };
const check = (name, cond, detail) => (cond ? ok(name, detail) : fail(name, detail));

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--enable-precise-memory-info", "--js-flags=--expose-gc"],
});
try {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await ctx.newPage();
  page.setDefaultTimeout(30000);

  // Sign in: the code becomes a cookie and leaves the address bar.
  const res = await page.goto(signin);
  check("signin", res.ok() && page.url() === origin + "/console/", page.url());
  const cookies = await ctx.cookies();
  const c = cookies.find((x) => x.name === "nexus_console");
  check("cookie", c && c.httpOnly && c.sameSite === "Strict", JSON.stringify(c && { httpOnly: c.httpOnly, sameSite: c.sameSite }));
  await page.waitForSelector("table[aria-label=Sessions]");

  // A terminal: type, see the output rendered.
  await page.fill("#new-project", project);
  await page.click("text=New terminal");
  await page.waitForSelector(".xterm-rows");
  const rows = () => page.evaluate(() => [...document.querySelectorAll(".xterm-rows > div")].map((d) => d.textContent.trimEnd()));
  const waitRow = async (text, ms = 20000) => {
    const end = Date.now() + ms;
    while (Date.now() < end) {
      if ((await rows()).includes(text)) return true;
      await page.waitForTimeout(50);
    }
    return false;
  };
  const count = async (text) => (await rows()).filter((r) => r === text).length;
  await page.waitForFunction(() => document.querySelector(".conn").textContent === "connected");
  await page.locator(".xterm-helper-textarea").focus();
  // The quotes keep the typed command from being the line looked for.
  await page.keyboard.type("echo hel''lo\n");
  check("echo", await waitRow("hello"), "renderer " + await page.evaluate(() => window.nexusConsole.renderer()));
  await page.screenshot({ path: artifacts + "/terminal.png" });

  // Resize with the window: the shell learns the new size.
  const before = await page.evaluate(() => window.nexusConsole.term.cols);
  await page.setViewportSize({ width: 900, height: 600 });
  await page.waitForFunction((b) => window.nexusConsole.term.cols !== b, before);
  const [cols, rowsN] = await page.evaluate(() => [window.nexusConsole.term.cols, window.nexusConsole.term.rows]);
  await page.keyboard.type("echo size=$(stty size | tr ' ' x)\n");
  check("resize", await waitRow(`size=${rowsN}x${cols}`), `${before} -> ${cols} columns`);

  // A dropped connection: output resumes, nothing lost, nothing twice.
  await page.evaluate(() => window.nexusConsole.dropConnection());
  await page.keyboard.type("echo ag''ain\n");
  check("reconnect", (await waitRow("again")) && (await count("hello")) === 1 && (await count("again")) === 1, "");

  // A flood, then Ctrl-C: the prompt comes back at once, the page's memory stays bounded.
  const floodSecs = Number(process.env.FLOOD_SECONDS || "5");
  await page.keyboard.type("yes\n");
  await page.waitForTimeout(floodSecs * 1000);
  const t0 = Date.now();
  await page.keyboard.press("Control+C");
  await page.keyboard.type("echo do''ne\n");
  const back = await waitRow("done", 30000);
  const heap = await page.evaluate(() => { if (window.gc) window.gc(); return performance.memory ? performance.memory.usedJSHeapSize : 0; });
  check("flood", back && heap < 200e6, `prompt back after ${Date.now() - t0} ms; heap ${(heap / 1e6).toFixed(1)} MB after ${floodSecs} s of yes`);

  // xterm.js's WebGL renderer, which a browser with a GPU gets (this one draws it in software):
  // the same terminal in a second tab, typed into, draws on a canvas.
  {
    const termId = await page.evaluate(() => location.hash.split("/")[2]);
    const gl = await ctx.newPage();
    await gl.goto(origin + "/console/#/sessions");
    await gl.evaluate(() => localStorage.setItem("nexus.renderer", "webgl"));
    await gl.goto(origin + "/console/#/terminal/" + termId);
    await gl.waitForFunction(() => document.querySelector(".conn") && document.querySelector(".conn").textContent === "connected");
    const used = await gl.evaluate(() => window.nexusConsole.renderer());
    await gl.evaluate(() => window.nexusConsole.term.input("echo we''bgl\r"));
    const drawn = await gl.waitForFunction(() => {
      const b = window.nexusConsole.term.buffer.active;
      for (let y = 0; y < b.length; y++) if (b.getLine(y).translateToString(true) === "webgl") return true;
      return false;
    }).then(() => true, () => false);
    const canvas = await gl.evaluate(() => !!document.querySelector(".term canvas"));
    check("webgl", used === "webgl" && drawn && canvas, `renderer ${used}, canvas ${canvas}`);
    await gl.evaluate(() => localStorage.removeItem("nexus.renderer"));
    await gl.close();
  }

  // A read-only share link: another browser watches the terminal live, and cannot type.
  await page.click("text=Share read-only");
  await page.waitForFunction(() => { const i = document.querySelector("#share-url"); return i && i.value.startsWith("http"); });
  const shareURL = await page.inputValue("#share-url");
  const viewerCtx = await browser.newContext({ viewport: { width: 1000, height: 700 } });
  const viewer = await viewerCtx.newPage();
  await viewer.goto(shareURL);
  const viewed = viewer.url();
  await viewer.waitForFunction(() => document.querySelector(".conn") && document.querySelector(".conn").textContent === "connected");
  await page.locator(".xterm-helper-textarea").focus();
  await page.keyboard.type("echo sha''red\n");
  const seen = await (async () => {
    const end = Date.now() + 20000;
    while (Date.now() < end) {
      const r = await viewer.evaluate(() => [...document.querySelectorAll(".xterm-rows > div")].map((d) => d.textContent.trimEnd()));
      if (r.includes("shared")) return true;
      await viewer.waitForTimeout(50);
    }
    return false;
  })();
  const refused = await viewer.evaluate(async () => {
    const id = location.hash.split("/")[2];
    const post = (await fetch("/v1/sessions/" + id + "/send", { method: "POST", headers: { "Content-Type": "application/json" }, body: '{"data":"x"}' })).status;
    const list = (await fetch("/v1/sessions")).status;
    const ws = await new Promise((resolve) => {
      const s = new WebSocket("ws://" + location.host + "/v1/sessions/" + id + "/stream?after=999999999");
      s.onopen = () => s.send(JSON.stringify({ op: "send", data: "echo typed-by-viewer\r" }));
      s.onmessage = (m) => { const e = JSON.parse(m.data); if (e.event === "error") { resolve(e.payload.error.code); s.close(); } };
      s.onerror = () => resolve("error");
    });
    return { post, list, ws };
  });
  check("share", viewed.includes("/console/#/view/") && !viewed.includes("token") && seen && refused.post === 401 && refused.list === 401 && refused.ws === "AUTHENTICATION_INVALID",
    JSON.stringify({ viewed, seen, refused }));
  await viewer.screenshot({ path: artifacts + "/shared-view.png" });
  await viewerCtx.close();

  // The sessions view lists the terminal, live.
  await page.goto(origin + "/console/#/sessions");
  await page.waitForSelector("tr[data-id] td");
  check("sessions", (await page.locator("tr[data-id]").count()) >= 1, "");
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.screenshot({ path: artifacts + "/sessions-live.png" });

  // The gateway's own log as a log view: its lines, then a filter.
  await page.fill("#new-log", "gateway");
  await page.click("text=Follow its log");
  await page.waitForFunction(() => [...document.querySelectorAll("ol.log li")].some((li) => li.textContent.includes("session created")));
  await page.fill("#o-filter", "type=terminal");
  const visible = await page.evaluate(() => [...document.querySelectorAll("ol.log li")].filter((li) => !li.hidden).map((li) => li.textContent));
  check("log", visible.length >= 1 && visible.every((t) => t.includes("type=terminal")), `${visible.length} lines match the filter`);
  await page.fill("#o-filter", "");
  await page.screenshot({ path: artifacts + "/log.png" });

  // The gateway's connections as a live table: its listening socket, at least.
  await page.goto(origin + "/console/#/sessions");
  await page.fill("#new-log", "gateway");
  await page.click("text=Watch its connections");
  await page.waitForFunction(() => [...document.querySelectorAll("table[aria-label=Connections] td")].some((td) => td.textContent === "listen"));
  check("net", true, "");
  await page.screenshot({ path: artifacts + "/connections.png" });

  // Search the history index; a hit opens its conversation, tool call included.
  await page.goto(origin + "/console/#/search");
  await page.fill("#q", "walruses");
  await page.press("#q", "Enter");
  await page.waitForSelector("ol.hits li a");
  const hit = await page.locator("ol.hits li").first().textContent();
  check("search", hit.includes("walruses") || hit.includes("walrus"), JSON.stringify(hit.slice(0, 80)));
  await page.screenshot({ path: artifacts + "/search.png" });
  await page.locator("ol.hits li a").first().click();
  await page.waitForSelector("ol.chat li.msg");
  await page.locator("details.tool summary").first().click();
  const chat = await page.locator("ol.chat").textContent();
  check("conversation", chat.includes("On the ice floes") && chat.includes("grep -i walrus atlas.txt") && chat.includes("Bash"), "");
  await page.screenshot({ path: artifacts + "/conversation.png" });

  // An agent shell's audit log as a transcript: the command, stdout and stderr apart, the exit.
  await page.goto(origin + "/console/#/shells");
  await page.waitForSelector("table[aria-label='Agent shells'] a");
  await page.locator("table[aria-label='Agent shells'] a").first().click();
  await page.waitForFunction(() => document.querySelector("ol.shell .exit") !== null);
  const tr = await page.evaluate(() => ({
    cmd: [...document.querySelectorAll("ol.shell .cmd")].map((d) => d.textContent).join("|"),
    out: [...document.querySelectorAll("ol.shell pre.stdout")].map((d) => d.textContent).join("|"),
    err: [...document.querySelectorAll("ol.shell pre.stderr")].map((d) => d.textContent).join("|"),
    exit: [...document.querySelectorAll("ol.shell .exit")].map((d) => d.textContent).join("|"),
  }));
  check("shell", tr.cmd.includes("$ echo from-an-agent") && tr.out.includes("from-an-agent") && tr.err.includes("oops") && /→ exit 0 \(\d+ ms\)/.test(tr.exit), JSON.stringify(tr));
  await page.screenshot({ path: artifacts + "/shell.png" });

  // A meta-chat: its roadmap's items beside the activity feed.
  await page.goto(origin + "/console/#/sessions");
  await page.selectOption("#f-type", "meta-chat");
  await page.locator("tr[data-id] button", { hasText: "Open" }).first().click();
  await page.waitForSelector("ul.items li");
  const item = await page.locator("ul.items li").first().textContent();
  check("roadmap", item.includes("write the docs") && item.includes("todo"), JSON.stringify(item));
  await page.screenshot({ path: artifacts + "/roadmap.png" });

  // An ai-chat session: send a message with its queue mode; the reply streams in.
  await page.goto(origin + "/console/#/sessions");
  await page.selectOption("#f-type", "ai-chat");
  await page.locator("tr[data-id] button", { hasText: "Open" }).first().click();
  await page.waitForFunction(() => document.querySelector(".conn") && document.querySelector(".conn").textContent === "live");
  await page.fill("#chat-input", "hello from the console");
  await page.selectOption("#chat-mode", "followup");
  await page.click("form.chat-send button[type=submit]");
  await page.waitForFunction(() => [...document.querySelectorAll("ol.chat li.role-assistant .text")].some((d) => d.textContent.includes("echo: hello from the console")));
  await page.waitForFunction(() => [...document.querySelectorAll("ol.chat li.marker")].some((li) => li.textContent.includes("turn completed")));
  check("chat", true, "the reply streamed in, then the turn's end");
  // Subagents: on "spawn deep" the scripted model spawns one on "spawn", which spawns its own on
  // "child task"; the panel shows them as a tree, the grandchild under the child.
  await page.fill("#chat-input", "spawn deep");
  await page.click("form.chat-send button[type=submit]");
  const nested = await page.waitForFunction(() => [...document.querySelectorAll("ul[aria-label=Subagents] > li > ul > li")].some((li) => li.textContent.includes("child task")))
    .then(() => true, () => false);
  check("subagent", nested, await page.evaluate(() => document.querySelector("ul[aria-label=Subagents]").textContent));
  await page.locator("aside.chat-side details summary", { hasText: "Branch tree" }).click();
  await page.screenshot({ path: artifacts + "/chat.png" });

  // A confirmation (level trusted): the model wants to run sleep; "deny" answers it, and the
  // turn goes on with the refusal.
  const trusted = await page.evaluate(async () => (await (await fetch("/v1/sessions")).json()).sessions.find((s) => s.type === "ai-chat" && s.metadata.level === "trusted").sessionId);
  await page.goto(origin + "/console/#/chat/" + trusted);
  await page.waitForFunction(() => document.querySelector(".conn") && document.querySelector(".conn").textContent === "live");
  await page.fill("#chat-input", "slow");
  await page.click("form.chat-send button[type=submit]");
  await page.waitForSelector("li.role-confirm button");
  await page.screenshot({ path: artifacts + "/confirm.png" });
  await page.locator("li.role-confirm button", { hasText: "deny" }).click();
  await page.waitForFunction(() => [...document.querySelectorAll("ol.chat li.role-assistant .text")].some((d) => d.textContent.trim() === "done"));
  check("confirm", true, "");

  // "New AI chat" opens a session on the backend named, in its chat view; the sessions table then
  // tells it apart: the distinct end of its id, its chat key, its model.
  await page.goto(origin + "/console/#/sessions");
  await page.fill("#new-backend", "scripted");
  await page.click("text=New AI chat");
  await page.waitForFunction(() => location.hash.startsWith("#/chat/") && document.querySelector(".conn") && document.querySelector(".conn").textContent === "live");
  const created = await page.evaluate(() => location.hash.split("/")[2]);
  await page.goto(origin + "/console/#/sessions");
  await page.selectOption("#f-type", "ai-chat");
  const row = page.locator(`tr[data-id="${created}"]`);
  await row.waitFor();
  const cells = await row.locator("td").allTextContents();
  check("new-chat", cells[0] === created.slice(-8) && cells[1] === "ai-chat" && cells[3].startsWith("agent:") && cells[4] === "scripted", JSON.stringify(cells));

  // The code is used up; a wrong one is refused the same way.
  const other = await browser.newContext();
  const p2 = await other.newPage();
  check("reused-code", (await p2.goto(signin)).status() === 401, "");
  check("wrong-code", (await p2.goto(origin + "/console/signin?code=nope")).status() === 401, "");
  check("no-cookie", (await p2.goto(origin + "/console/")).status() === 401, "");

  // A page of another origin, in the signed-in browser: no cookie goes (SameSite=Strict), and
  // the gateway refuses it anyway.
  await page.route("http://elsewhere.test/", (r) => r.fulfill({ contentType: "text/html", body: "<!doctype html><title>elsewhere</title>" }));
  await page.goto("http://elsewhere.test/");
  const cross = await page.evaluate(async (o) => {
    let fetchStatus;
    try { fetchStatus = (await fetch(o + "/v1/sessions", { credentials: "include" })).status; } catch (e) { fetchStatus = "error"; }
    const ws = await new Promise((resolve) => {
      const s = new WebSocket(o.replace("http", "ws") + "/v1/sessions/watch");
      s.onmessage = () => resolve("message");
      s.onerror = () => resolve("refused");
      s.onclose = () => resolve("refused");
    });
    return { fetchStatus, ws };
  }, origin);
  check("cross-origin", cross.fetchStatus !== 200 && cross.ws === "refused", JSON.stringify(cross));
} catch (e) {
  fail("exception", String(e && e.stack || e));
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
