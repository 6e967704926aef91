// Drives `nexus acp` with the official ACP TypeScript SDK's client, as an editor would, and
// prints what it saw as one JSON object (internal/cli/testdata/ai/ai_acp.txtar checks it).
//
//   node driver.mjs WORKSPACE NEXUS [ARGS...]
//
// Two connections (two `nexus acp` processes, as an editor restarted): the first opens a
// session and prompts with a permission request answered (allow once), opens a second and
// cancels its prompt at the permission request, a third switched to mode yolo prompts without
// one (each on a new conversation: the tiny model calls a tool only in a conversation without a
// tool result), and lists the sessions; the second loads the first's session (its history replayed), prompts with a
// resource link read through fs/read_text_file (an unsaved buffer), and loads a key no
// conversation has.
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import { writeFileSync } from "node:fs";
import * as acp from "@agentclientprotocol/sdk";

const [workspace, nexus, ...nexusArgs] = process.argv.slice(2);
if (!workspace || !nexus) {
  console.error("usage: node driver.mjs WORKSPACE NEXUS [ARGS...]");
  process.exit(2);
}

// connect starts `nexus acp` and runs op with a client whose permission and file handlers
// are the caller's.
async function connect(handlers, op) {
  const child = spawn(nexus, nexusArgs, { stdio: ["pipe", "pipe", "inherit"] });
  const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));
  const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  const app = acp
    .client({ name: "nexus-acp-test-driver" })
    .onNotification(acp.methods.client.session.update, async ({ params }) => handlers.update(params))
    .onRequest(acp.methods.client.session.requestPermission, async (ctx) => handlers.permission(ctx))
    .onRequest(acp.methods.client.fs.readTextFile, async ({ params }) => handlers.readTextFile(params));
  try {
    return await app.connectWith(stream, op);
  } finally {
    child.stdin.end();
    const ex = await exited;
    if (ex.code !== 0) throw new Error(`nexus acp exited with ${JSON.stringify(ex)}`);
  }
}

const out = {};
let updates = [];
let permission = async () => ({ outcome: { outcome: "cancelled" } });
let readTextFile = async () => {
  throw new Error("no file expected");
};
const handlers = {
  update: (n) => updates.push(n),
  permission: (ctx) => permission(ctx),
  readTextFile: (p) => readTextFile(p),
};

// summary keeps what the checks need of a prompt's updates.
function summary(list) {
  return list.map((n) => {
    const u = n.update;
    switch (u.sessionUpdate) {
      case "agent_message_chunk":
      case "user_message_chunk":
      case "agent_thought_chunk":
        return { u: u.sessionUpdate, text: u.content.text };
      case "tool_call":
        return { u: u.sessionUpdate, id: u.toolCallId, kind: u.kind, status: u.status, title: u.title, locations: u.locations };
      case "tool_call_update":
        return { u: u.sessionUpdate, id: u.toolCallId, status: u.status, content: (u.content ?? []).map((c) => c.type) };
      default:
        return { u: u.sessionUpdate };
    }
  });
}

await connect(handlers, async (ctx) => {
  const init = await ctx.request(acp.methods.agent.initialize, {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: { fs: { readTextFile: true, writeTextFile: false } },
  });
  out.initialize = init;

  const created = await ctx.request(acp.methods.agent.session.new, { cwd: workspace, mcpServers: [] });
  out.new = created;
  const sessionId = created.sessionId;

  // A permission request, answered "allow once".
  const asked = [];
  permission = async ({ params }) => {
    asked.push(params);
    const once = params.options.find((o) => o.kind === "allow_once");
    return { outcome: { outcome: "selected", optionId: once.optionId } };
  };
  updates = [];
  const first = await ctx.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "run something" }] });
  out.prompt1 = { stopReason: first.stopReason, usage: first.usage, asked, updates: summary(updates) };

  // Cancelled at the permission request: session/cancel, then the request answered cancelled.
  const cancelled = await ctx.request(acp.methods.agent.session.new, { cwd: workspace, mcpServers: [] });
  const asked2 = [];
  permission = async ({ params }) => {
    asked2.push(params);
    await ctx.notify(acp.methods.agent.session.cancel, { sessionId: cancelled.sessionId });
    return { outcome: { outcome: "cancelled" } };
  };
  updates = [];
  const second = await ctx.request(acp.methods.agent.session.prompt, { sessionId: cancelled.sessionId, prompt: [{ type: "text", text: "run something" }] });
  out.prompt2 = { stopReason: second.stopReason, asked: asked2.length, updates: summary(updates) };

  // Mode yolo: no permission asked.
  // This one has an MCP server of the editor's: nexus's own agent shells (nexus mcp).
  const shells = { name: "shells", command: nexus, args: ["mcp"], env: [{ name: "NEXUS_HOME", value: process.env.NEXUS_HOME }] };
  const yolo = await ctx.request(acp.methods.agent.session.new, { cwd: workspace, mcpServers: [shells] });
  await ctx.request(acp.methods.agent.session.setMode, { sessionId: yolo.sessionId, modeId: "yolo" });
  let asked3 = 0;
  permission = async () => {
    asked3++;
    return { outcome: { outcome: "cancelled" } };
  };
  updates = [];
  const third = await ctx.request(acp.methods.agent.session.prompt, { sessionId: yolo.sessionId, prompt: [{ type: "text", text: "run something" }] });
  out.prompt3 = { stopReason: third.stopReason, asked: asked3, updates: summary(updates) };

  try {
    await ctx.request(acp.methods.agent.session.setMode, { sessionId, modeId: "reckless" });
    out.badMode = "accepted";
  } catch (e) {
    out.badMode = { code: e.code, message: e.message };
  }

  out.list = await ctx.request(acp.methods.agent.session.list, {});
  out.listCwd = await ctx.request(acp.methods.agent.session.list, { cwd: "/nowhere" });
  out.sessionId = sessionId;
  out.cancelledId = cancelled.sessionId;
  out.yoloId = yolo.sessionId;
});

// A second editor process: load the conversation, then a prompt with an open file.
writeFileSync(`${workspace}/notes.txt`, "what is on disk\n");
await connect(handlers, async (ctx) => {
  await ctx.request(acp.methods.agent.initialize, {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: { fs: { readTextFile: true, writeTextFile: false } },
  });
  updates = [];
  const loaded = await ctx.request(acp.methods.agent.session.load, { sessionId: out.sessionId, cwd: workspace, mcpServers: [] });
  out.load = { modes: loaded.modes, updates: summary(updates) };

  const reads = [];
  readTextFile = async (p) => {
    reads.push(p.path);
    return { content: "UNSAVED BUFFER: the editor's text\n" };
  };
  permission = async () => ({ outcome: { outcome: "cancelled" } });
  updates = [];
  const withFile = await ctx.request(acp.methods.agent.session.prompt, {
    sessionId: out.sessionId,
    prompt: [
      { type: "text", text: "look at this file" },
      { type: "resource_link", name: "notes.txt", uri: `file://${workspace}/notes.txt` },
    ],
  });
  out.prompt4 = { stopReason: withFile.stopReason, reads };

  try {
    await ctx.request(acp.methods.agent.session.load, { sessionId: "agent:shell:ai:nosuch", cwd: workspace, mcpServers: [] });
    out.loadMissing = "loaded";
  } catch (e) {
    out.loadMissing = { code: e.code, message: e.message };
  }
});

process.stdout.write(JSON.stringify(out, null, 1) + "\n");
