// One `nexus acp` connection across a gateway restart (internal/cli/testdata/ai/ai_acp_restart.txtar):
// a session and a prompt, then READY is written and the script waits for GO to exist (the
// test restarts the gateway meanwhile), then a second prompt on the same session. Prints the
// two answers as JSON.
//
//   node restart.mjs WORKSPACE READY GO NEXUS [ARGS...]
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import { existsSync, watch, writeFileSync } from "node:fs";
import { dirname, basename } from "node:path";
import * as acp from "@agentclientprotocol/sdk";

const [workspace, ready, go, nexus, ...nexusArgs] = process.argv.slice(2);

// appears resolves once path exists (watching its directory, never polling a clock).
function appears(path) {
  return new Promise((resolve) => {
    const w = watch(dirname(path), () => {
      if (existsSync(path)) {
        w.close();
        resolve();
      }
    });
    if (existsSync(path)) {
      w.close();
      resolve();
    }
  });
}

const child = spawn(nexus, nexusArgs, { stdio: ["pipe", "pipe", "inherit"] });
const exited = new Promise((resolve) => child.on("exit", (code) => resolve(code)));
const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
const out = {};
await acp
  .client({ name: "nexus-acp-restart-driver" })
  .onNotification(acp.methods.client.session.update, async () => {})
  .onRequest(acp.methods.client.session.requestPermission, async () => ({ outcome: { outcome: "cancelled" } }))
  .connectWith(stream, async (ctx) => {
    await ctx.request(acp.methods.agent.initialize, { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} });
    const s = await ctx.request(acp.methods.agent.session.new, { cwd: workspace, mcpServers: [] });
    out.sessionId = s.sessionId;
    out.before = (await ctx.request(acp.methods.agent.session.prompt, { sessionId: s.sessionId, prompt: [{ type: "text", text: "before" }] })).stopReason;
    writeFileSync(ready, "");
    await appears(go);
    out.after = (await ctx.request(acp.methods.agent.session.prompt, { sessionId: s.sessionId, prompt: [{ type: "text", text: "after" }] })).stopReason;
  });
child.stdin.end();
if ((await exited) !== 0) throw new Error("nexus acp failed");
process.stdout.write(JSON.stringify(out) + "\n");
