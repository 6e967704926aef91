// The console of one node of a cluster in a real headless Chromium (playwright-core), showing
// a terminal of another node. internal/cli's TestClusterConsole runs it against node b of
// three `nexus serve --nats` nodes:
//
//   node e2e/cluster.mjs SIGNIN_URL SESSION_ID NODE SEEN ARTIFACTS_DIR
//
// SESSION_ID is a terminal on NODE (not the console's node) whose output already has the line
// SEEN. It checks that the sessions view lists the terminal with its node, that opening it
// renders SEEN, and that what is typed in the page (sent to the owning node) comes back.
// It prints one line per check ("ok NAME ..." or "FAIL NAME ...") and exits 1 on a failure.
import { chromium } from "playwright-core";

const [signin, id, owner, seenLine, artifacts] = process.argv.slice(2);
const origin = new URL(signin).origin;
let failed = false;
const ok = (name, detail = "") => console.log("ok", name, detail);
const fail = (name, detail = "") => { failed = true; console.log("FAIL", name, detail); };
const check = (name, cond, detail) => (cond ? ok(name, detail) : fail(name, detail));

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox"],
});
try {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await ctx.newPage();
  page.setDefaultTimeout(30000);

  const res = await page.goto(signin);
  check("signin", res.ok() && page.url() === origin + "/console/", page.url());

  // The sessions view lists the other node's terminal, with its node.
  const row = page.locator(`tr[data-id="${id}"]`);
  await row.waitFor();
  const node = await row.locator("td.id .node").textContent().catch(() => "");
  check("listed", node === owner, `node cell ${JSON.stringify(node)}, want ${JSON.stringify(owner)}`);
  await page.screenshot({ path: artifacts + "/cluster-sessions.png" });

  // Opened, it renders what the terminal printed on its node, and what is typed here comes back.
  await row.locator("button", { hasText: "Open" }).click();
  await page.waitForSelector(".xterm-rows");
  await page.waitForFunction(() => document.querySelector(".conn").textContent === "connected");
  const rows = () => page.evaluate(() => [...document.querySelectorAll(".xterm-rows > div")].map((d) => d.textContent.trimEnd()));
  const waitRow = async (text, ms = 30000) => {
    const end = Date.now() + ms;
    while (Date.now() < end) {
      if ((await rows()).includes(text)) return true;
      await page.waitForTimeout(50);
    }
    return false;
  };
  check("output", await waitRow(seenLine), JSON.stringify((await rows()).filter((r) => r)));
  await page.locator(".xterm-helper-textarea").focus();
  // The quotes keep the typed command from being the line looked for.
  await page.keyboard.type("echo typed-''on-b\n");
  check("typed", await waitRow("typed-on-b"), JSON.stringify((await rows()).filter((r) => r)));
  await page.screenshot({ path: artifacts + "/cluster-terminal.png" });
} catch (e) {
  fail("exception", e.stack || String(e));
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
