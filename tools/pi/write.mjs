#!/usr/bin/env node
// Writes pi sessions with the real pi coding agent's SessionManager, for
// internal/transcript/interop_test.go: nexus must open what pi writes and build
// the same context at every entry.
//
//   node write.mjs OUTDIR [CWD]
//
// writes three files into OUTDIR and prints their paths, one a line:
//   1. a session with every entry type pi writes: model and thinking-level
//      changes, session names, labels (set and cleared), tool calls and results,
//      a bash execution, custom and custom_message entries, an image block, plain
//      branches (branch()), a branch summary (branchWithSummary(), one from the
//      root too, so the file has two roots), two compactions (one whose
//      firstKeptEntryId is on the path, one whose is not), an aborted reply;
//   2. a fork of one of its branches (createBranchedSession(), labels re-appended)
//      continued with a new exchange;
//   3. a copy of the whole file into another cwd (SessionManager.forkFrom())
//      continued likewise.
//
// Set PI_CODING_AGENT_DIR to a scratch directory: every call here passes explicit
// directories, but pi's config module reads that variable.
const smURL = new URL(
	"./node_modules/@mariozechner/pi-coding-agent/dist/core/session-manager.js",
	import.meta.url,
);
const { SessionManager } = await import(smURL.href);

const argv = process.argv.slice(2);
if (argv.length < 1 || argv.length > 2) {
	process.stderr.write("usage: node write.mjs OUTDIR [CWD]\n");
	process.exit(2);
}
const outDir = argv[0];
const cwd = argv[1] ?? "/work/interop";

let clock = Date.parse("2026-05-01T09:00:00.000Z");
const now = () => (clock += 1000);

const usage = (input, output) => ({
	input,
	output,
	cacheRead: 0,
	cacheWrite: 0,
	totalTokens: input + output,
	cost: { input: input / 1e6, output: output / 1e6, cacheRead: 0, cacheWrite: 0, total: (input + output) / 1e6 },
});
const user = (content) => ({ role: "user", content, timestamp: now() });
const assistant = (content, { provider = "anthropic", model = "claude-sonnet-4-5", stopReason = "stop", ...rest } = {}) => ({
	role: "assistant",
	content,
	api: provider === "openai" ? "openai-responses" : "anthropic-messages",
	provider,
	model,
	usage: usage(120, 30),
	stopReason,
	timestamp: now(),
	...rest,
});
const toolCall = (id, name, args) => ({ type: "toolCall", id, name, arguments: args });
const toolResult = (toolCallId, toolName, text, isError = false) => ({
	role: "toolResult",
	toolCallId,
	toolName,
	content: [{ type: "text", text }],
	details: { lines: text.split("\n").length },
	isError,
	timestamp: now(),
});

const sm = SessionManager.create(cwd, outDir);
sm.appendModelChange("anthropic", "claude-sonnet-4-5");
sm.appendThinkingLevelChange("medium");
sm.appendSessionInfo("  interop: first name  ");
// Characters JSON encoders treat differently (Go escapes <>& and U+2028 by default).
const u1 = sm.appendMessage(user("Find the bug in parse.go <a href=\"x\"> & \u2028 line sep, \u00e9t\u00e9 \ud83d\ude80"));
const a1 = sm.appendMessage(
	assistant(
		[
			{ type: "thinking", thinking: "Read the file first.", thinkingSignature: "c2lnbmF0dXJl" },
			{ type: "text", text: "Let me read it." },
			toolCall("call_1", "read", { path: "parse.go", offset: 1, limit: 200 }),
		],
		{ stopReason: "toolUse" },
	),
);
sm.appendMessage(toolResult("call_1", "read", "package main\n\nfunc parse() {}\n"));
const a2 = sm.appendMessage(assistant([{ type: "text", text: "The loop bound is off by one." }]));
sm.appendLabelChange(u1, "start");
sm.appendLabelChange(a2, "diagnosis");
sm.appendCustomEntry("nexus.turn", { turn: 1, tools: ["read"] });
sm.appendCustomMessageEntry("reminder", "Remember to run the tests.", true, { source: "hook" });
const u2 = sm.appendMessage(
	user([
		{ type: "text", text: "Here is a screenshot." },
		{ type: "image", data: "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==", mimeType: "image/png" },
	]),
);
sm.appendMessage({
	role: "bashExecution",
	command: "go test ./...",
	output: "ok  \texample.com/p\t0.01s\n",
	exitCode: 0,
	cancelled: false,
	truncated: false,
	timestamp: now(),
});
sm.appendMessage(assistant([{ type: "text", text: "Tests pass." }], { provider: "openai", model: "gpt-5" }));
sm.appendModelChange("openai", "gpt-5.1");
const u3 = sm.appendMessage(user("Now fix the writer."));
sm.appendMessage(assistant([toolCall("call_2", "edit", { path: "write.go", oldText: "a", newText: "b" })], { provider: "openai", model: "gpt-5.1", stopReason: "toolUse" }));
sm.appendMessage(toolResult("call_2", "edit", "no match for oldText", true));
sm.appendMessage(assistant([{ type: "text", text: "The edit failed; retrying." }], { provider: "openai", model: "gpt-5.1" }));
sm.appendCompaction("Fixed parse.go; <writer> & friends pending.", u3, 23456, { readFiles: ["parse.go"], modifiedFiles: ["parse.go"] }, false);
sm.appendMessage(user("Continue after the compaction."));
const a6 = sm.appendMessage(assistant([{ type: "text", text: "Continuing." }], { provider: "openai", model: "gpt-5.1" }));
sm.appendLabelChange(u1, undefined);
sm.appendCustomMessageEntry("status", [{ type: "text", text: "hidden status" }], false);

// A plain branch from the diagnosis.
sm.branch(a2);
sm.appendThinkingLevelChange("high");
sm.appendMessage(user("Try a different approach."));
sm.appendMessage(assistant([], { stopReason: "aborted", usage: usage(0, 0) }));

// A branch with a summary of the abandoned path, then a compaction whose
// firstKeptEntryId is not on this path.
sm.branchWithSummary(u2, "Explored approach B: it needs a <new> parser.", { readFiles: ["b.go"], modifiedFiles: [] }, false);
sm.appendMessage(user("Back on approach A."));
sm.appendCompaction("Approach A only.", a6, 9999, undefined, true);
sm.appendMessage(user("After the second compaction."));
sm.appendMessage(assistant([{ type: "text", text: "Done with A." }]));

// A branch summary from before the first entry makes a second root.
sm.branchWithSummary(null, "Started over from scratch.");
sm.appendMessage(user("Fresh start."));
sm.appendMessage(assistant([{ type: "text", text: "Hello again." }], { provider: "", model: "" }));
sm.appendSessionInfo("interop session");

const mainPath = sm.getSessionFile();

// Fork the compacted main branch into its own file, then continue there.
const forkPath = sm.createBranchedSession(a6);
sm.appendMessage(user("In the fork."));
sm.appendMessage(assistant([{ type: "text", text: "Fork reply." }]));

// Copy the whole session into another project directory, then continue there.
const copy = SessionManager.forkFrom(mainPath, `${cwd}-copy`, outDir);
copy.appendMessage(user("In the copy."));
copy.appendMessage(assistant([{ type: "text", text: "Copy reply." }]));

process.stdout.write(`${mainPath}\n${forkPath}\n${copy.getSessionFile()}\n`);
