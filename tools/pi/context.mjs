#!/usr/bin/env node
// Builds the model context of a pi transcript with the real pi coding agent's
// SessionManager (the package pinned in package.json), so nexus can compare its
// own context builder against pi's (internal/transcript/interop_test.go) and
// time it (bench/transcript).
//
//   node context.mjs FILE [LEAF]       one context as JSON:
//                                      {"leafId","model","thinkingLevel","messages"}
//   node context.mjs --count FILE [LEAF]  only the number of messages (benchmarks:
//                                      printing megabytes of JSON would dominate)
//   node context.mjs --batch < REQ     many files and leaves in one process (tests);
//                                      REQ and the reply are described at runBatch
//
// Set PI_CODING_AGENT_DIR to a scratch directory: every SessionManager call here
// passes explicit directories, but pi's config module reads that variable.
import { copyFileSync, mkdtempSync, openSync, readSync, closeSync, rmSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, basename } from "node:path";
import { fileURLToPath } from "node:url";

// The package's index also loads the whole agent (TUI, providers: about 0.7 s
// of imports); the session manager module it re-exports is the same code.
const smURL = new URL(
	"./node_modules/@mariozechner/pi-coding-agent/dist/core/session-manager.js",
	import.meta.url,
);
const { SessionManager, CURRENT_SESSION_VERSION } = await import(smURL.href);

// headerVersion reads the header line's version the way pi's migration does
// (`header.version ?? 1`), without reading the whole file.
function headerVersion(path) {
	const fd = openSync(path, "r");
	try {
		const buf = Buffer.alloc(64 * 1024);
		const n = readSync(fd, buf, 0, buf.length, 0);
		const first = buf.toString("utf8", 0, n).split("\n")[0];
		let h;
		try {
			h = JSON.parse(first);
		} catch {
			h = null;
		}
		// SessionManager truncates a file whose header it cannot read and
		// starts a new session in it: refuse before it gets the chance.
		if (h?.type !== "session" || typeof h.id !== "string") {
			throw new Error(`${path}: first line is not a pi session header`);
		}
		return h.version ?? 1;
	} finally {
		closeSync(fd);
	}
}

// open loads a transcript with SessionManager.open. pi rewrites a file it
// migrates (v1/v2) in place, so older files are opened from a scratch copy:
// the caller's file is never modified.
function open(path, scratch) {
	let file = path;
	if (headerVersion(path) < CURRENT_SESSION_VERSION) {
		file = join(scratch, `${Math.random().toString(16).slice(2)}-${basename(path)}`);
		copyFileSync(path, file);
	}
	return SessionManager.open(file, scratch);
}

// shape maps pi's SessionContext to the shape of nexus's transcript.Context as
// `nexus chat history` prints it. JSON has no undefined: an absent provider,
// model id or thinking level becomes "" as in nexus (other values pass as they are).
function shape(sm, ctx) {
	const m = ctx.model;
	return {
		leafId: sm.getLeafId() ?? "",
		model: m ? { provider: m.provider ?? "", modelId: m.modelId ?? "" } : null,
		thinkingLevel: ctx.thinkingLevel ?? "",
		messages: ctx.messages,
	};
}

// contextAt builds the context at leaf (the default leaf when empty) with the
// public API: branch() moves the leaf, buildSessionContext() walks from it.
function contextAt(sm, leaf) {
	if (leaf) sm.branch(leaf);
	return shape(sm, sm.buildSessionContext());
}

// tips returns the ids of the entries without children, in file order.
function tips(sm) {
	const parents = new Set();
	for (const e of sm.getEntries()) if (e.parentId) parents.add(e.parentId);
	return sm.getEntries().filter((e) => !parents.has(e.id)).map((e) => e.id);
}

// runBatch reads {"files":[{"path":P,"leaves":L}]} from stdin, where L is
// "default", "tips" (every entry without children), "all" (every entry) or a
// list of entry ids, and prints one JSON array with, per file:
// {"path","entryIds" (file order, after migration),"labels" {id: label},
// "sessionName","parentSession","contexts":[default leaf first, then L]} or
// {"path","error"}.
function runBatch(scratch) {
	const req = JSON.parse(readFileSync(0, "utf8"));
	const out = [];
	for (const f of req.files) {
		try {
			const sm = open(f.path, scratch);
			const entries = sm.getEntries();
			const defaultLeaf = sm.getLeafId();
			let leaves = [];
			if (f.leaves === "tips") leaves = tips(sm);
			else if (f.leaves === "all") leaves = entries.map((e) => e.id);
			else if (Array.isArray(f.leaves)) leaves = f.leaves;
			const labels = {};
			for (const e of entries) {
				const l = sm.getLabel(e.id);
				if (l !== undefined) labels[e.id] = l;
			}
			const contexts = [contextAt(sm, "")];
			for (const leaf of leaves) {
				contexts.push(contextAt(sm, leaf));
			}
			sm.branch(defaultLeaf);
			out.push({
				path: f.path,
				entryIds: entries.map((e) => e.id),
				labels,
				sessionName: sm.getSessionName() ?? "",
				parentSession: sm.getHeader()?.parentSession ?? "",
				contexts,
			});
		} catch (err) {
			out.push({ path: f.path, error: String(err?.stack ?? err) });
		}
	}
	process.stdout.write(JSON.stringify(out));
}

function main(argv) {
	const scratch = mkdtempSync(join(tmpdir(), "pi-context-"));
	try {
		if (argv[0] === "--batch") {
			runBatch(scratch);
			return 0;
		}
		let count = false;
		if (argv[0] === "--count") {
			count = true;
			argv = argv.slice(1);
		}
		if (argv.length < 1 || argv.length > 2) {
			process.stderr.write("usage: node context.mjs [--count] FILE [LEAF] | --batch < REQUEST\n");
			return 2;
		}
		const sm = open(argv[0], scratch);
		const ctx = contextAt(sm, argv[1] ?? "");
		process.stdout.write(count ? `${ctx.messages.length}\n` : `${JSON.stringify(ctx)}\n`);
		return 0;
	} finally {
		rmSync(scratch, { recursive: true, force: true });
	}
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
	process.exitCode = main(process.argv.slice(2));
}
