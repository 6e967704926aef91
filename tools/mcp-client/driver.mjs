// Drives nexus's /v1/mcp with the official MCP TypeScript SDK's Streamable HTTP client, for
// internal/gateway/mcp_ts_test.go, and prints what it saw as one JSON object on stdout; the
// Go test makes the assertions.
//
//   node driver.mjs URL DIR      (the bearer token in NEXUS_TOKEN)
//
// Steps: connect without the token and with a wrong one (both must be refused), then with it:
// list the tools, set the log level, open a local shell, run `cd DIR && export ...` and a
// command that shows the state persisted, a command that waits for the driver to see a
// progress notification, destroy the shell, and call it once more (a tool error).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { LoggingMessageNotificationSchema } from "@modelcontextprotocol/sdk/types.js";
import { writeFileSync } from "node:fs";
import { join } from "node:path";

const [url, dir] = process.argv.slice(2);
const token = process.env.NEXUS_TOKEN ?? "";
const out = { refused: {} };

function newClient() {
  return new Client({ name: "nexus-ts-driver", version: "1.0.0" }, { capabilities: {} });
}

async function refusedWith(name, headers) {
  const c = newClient();
  try {
    await c.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }));
    out.refused[name] = { connected: true };
    await c.close();
  } catch (e) {
    out.refused[name] = { connected: false, code: e?.code ?? null, message: String(e?.message ?? e) };
  }
}

await refusedWith("noToken", {});
await refusedWith("wrongToken", { Authorization: "Bearer not-the-token" });

const client = newClient();
const logs = [];
client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => logs.push(n.params));
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
await client.connect(transport);
out.mcpSessionId = transport.sessionId ?? null;
out.protocolVersion = transport.protocolVersion ?? null;
out.server = client.getServerVersion();
out.capabilities = client.getServerCapabilities();

const tools = await client.listTools();
out.tools = tools.tools.map((t) => t.name).sort();
out.execInputSchema = tools.tools.find((t) => t.name === "session_exec")?.inputSchema ?? null;
await client.setLoggingLevel("info");

async function call(name, args, options) {
  return client.callTool({ name, arguments: args }, undefined, options);
}

const created = await call("session_create", { transport: "local" });
out.created = created.structuredContent;
const sid = created.structuredContent.session_id;
out.setup = (await call("session_exec", { session_id: sid, command: `cd '${dir}' && export NX_TS=persisted` })).structuredContent;
const state = await call("session_exec", { session_id: sid, command: "pwd; echo $NX_TS; echo to-stderr >&2; false" });
out.state = { structured: state.structuredContent, text: state.content?.[0]?.text ?? null, isError: state.isError ?? false };

// A command that ends once the driver has received a progress notification for it.
const flag = join(dir, "progress-seen");
let progress = 0;
const waited = await call("session_exec", { session_id: sid, command: `while [ ! -e '${flag}' ]; do sleep 0.02; done; echo done` }, {
  onprogress: (p) => {
    progress++;
    writeFileSync(flag, "");
  },
  timeout: 600000,
});
out.progress = { notifications: progress, stdout: waited.structuredContent?.stdout ?? null };

const listed = await call("session_list", {});
out.listed = listed.structuredContent;
out.destroyed = (await call("session_destroy", { session_id: sid })).structuredContent;
const gone = await call("session_exec", { session_id: sid, command: "true" });
out.afterDestroy = { isError: gone.isError ?? false, text: gone.content?.[0]?.text ?? null };
out.logs = logs;

await transport.terminateSession();
await client.close();
process.stdout.write(JSON.stringify(out) + "\n");
