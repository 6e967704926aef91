// gemini-shim.mjs PORT UPSTREAM [--watch-stdin] — the Gemini API's generateContent, streamGenerateContent and
// countTokens on 127.0.0.1:PORT, answered by an OpenAI-compatible chat completions server at
// UPSTREAM (tools/llm's llama-server, e.g. http://127.0.0.1:8011/v1). Gemini CLI speaks only the
// Gemini API (its custom endpoint, GOOGLE_GEMINI_BASE_URL, keeps that wire protocol), and
// llama-server does not: this translates, so that the real CLI runs offline against the tests'
// model and writes its real chat recordings. Requests and answers are translated, nothing else
// is made up: the text, the tool calls and the token counts are the model's.
//
// Used by tools/history-samples/refresh.sh and by the gemini-cli ACP preset's test
// (internal/testkit/llmserver.GeminiShim). PORT 0 takes a free port; the first line on stdout
// names the one it listens on ("gemini-shim on PORT -> UPSTREAM"). With --watch-stdin it exits
// when its stdin ends: a test holds the other end, so the shim never outlives it.
import http from "node:http";

const [port, upstream, watch] = process.argv.slice(2);
if (!port || !upstream) {
  console.error("usage: node gemini-shim.mjs PORT UPSTREAM");
  process.exit(2);
}

// lower turns Gemini's schema types (OBJECT, STRING) into JSON Schema's.
function lower(schema) {
  if (Array.isArray(schema)) return schema.map(lower);
  if (!schema || typeof schema !== "object") return schema;
  const out = {};
  for (const [k, v] of Object.entries(schema)) {
    out[k] = k === "type" && typeof v === "string" ? v.toLowerCase() : lower(v);
  }
  return out;
}

function textOf(parts) {
  return (parts ?? []).filter((p) => typeof p.text === "string" && !p.thought).map((p) => p.text).join("");
}

function toOpenAI(req, model) {
  const messages = [];
  const sys = req.systemInstruction;
  if (sys) messages.push({ role: "system", content: typeof sys === "string" ? sys : textOf(sys.parts) });
  let n = 0;
  const pending = []; // ids of the calls the next responses answer, in order
  for (const c of req.contents ?? []) {
    const parts = c.parts ?? [];
    if (c.role === "model") {
      const calls = parts.filter((p) => p.functionCall).map((p) => {
        const id = p.functionCall.id || `call_${n++}`;
        pending.push(id);
        return { id, type: "function", function: { name: p.functionCall.name, arguments: JSON.stringify(p.functionCall.args ?? {}) } };
      });
      const m = { role: "assistant", content: textOf(parts) };
      if (calls.length) m.tool_calls = calls;
      messages.push(m);
      continue;
    }
    for (const p of parts.filter((p) => p.functionResponse)) {
      const id = p.functionResponse.id || pending.shift() || `call_${n++}`;
      messages.push({ role: "tool", tool_call_id: id, content: JSON.stringify(p.functionResponse.response ?? {}) });
    }
    const text = textOf(parts);
    if (text || !parts.some((p) => p.functionResponse)) messages.push({ role: "user", content: text });
  }
  const tools = [];
  for (const t of req.tools ?? []) {
    for (const f of t.functionDeclarations ?? []) {
      tools.push({ type: "function", function: { name: f.name, description: f.description ?? "",
        parameters: lower(f.parametersJsonSchema ?? f.parameters ?? { type: "object", properties: {} }) } });
    }
  }
  const body = { model, messages, stream: false, temperature: 0 };
  if (tools.length) body.tools = tools;
  return body;
}

function toGemini(resp, model) {
  const choice = resp.choices?.[0] ?? {};
  const msg = choice.message ?? {};
  const parts = [];
  if (msg.content) parts.push({ text: msg.content });
  for (const tc of msg.tool_calls ?? []) {
    let args = {};
    try { args = JSON.parse(tc.function.arguments || "{}"); } catch { args = {}; }
    parts.push({ functionCall: { id: tc.id, name: tc.function.name, args } });
  }
  if (!parts.length) parts.push({ text: "" });
  const u = resp.usage ?? {};
  return {
    candidates: [{ content: { role: "model", parts }, finishReason: "STOP", index: 0 }],
    usageMetadata: { promptTokenCount: u.prompt_tokens ?? 0, candidatesTokenCount: u.completion_tokens ?? 0,
      totalTokenCount: u.total_tokens ?? 0 },
    modelVersion: model,
  };
}

const server = http.createServer(async (req, res) => {
  let raw = "";
  for await (const chunk of req) raw += chunk;
  const m = /\/models\/([^:/]+):(\w+)/.exec(req.url ?? "");
  if (!m) {
    res.writeHead(404, { "content-type": "application/json" });
    res.end(JSON.stringify({ error: { code: 404, message: `no route ${req.url}`, status: "NOT_FOUND" } }));
    return;
  }
  const [, model, method] = m;
  const body = raw ? JSON.parse(raw) : {};
  if (method === "countTokens") {
    const text = JSON.stringify(body.contents ?? body.generateContentRequest?.contents ?? []);
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ totalTokens: Math.ceil(text.length / 4) }));
    return;
  }
  try {
    const up = await fetch(`${upstream}/chat/completions`, {
      method: "POST", headers: { "content-type": "application/json", authorization: "Bearer local" },
      body: JSON.stringify(toOpenAI(body, model)),
    });
    const out = await up.json();
    if (!up.ok) throw new Error(JSON.stringify(out));
    const g = toGemini(out, model);
    if (method === "streamGenerateContent") {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.end(`data: ${JSON.stringify(g)}\n\n`);
    } else {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify(g));
    }
  } catch (err) {
    res.writeHead(500, { "content-type": "application/json" });
    res.end(JSON.stringify({ error: { code: 500, message: String(err), status: "INTERNAL" } }));
  }
});
server.listen(Number(port), "127.0.0.1", () => console.log(`gemini-shim on ${server.address().port} -> ${upstream}`));
if (watch === "--watch-stdin") {
  process.stdin.on("end", () => process.exit(0));
  process.stdin.resume();
}
