#!/usr/bin/env bash
# refresh.sh [TOOL...] — makes the history index's fixtures with the real tools: installs the
# pinned CLIs (package.json here; Crush at CRUSH_VERSION), runs each once or twice against
# tools/llm's llama-server with marker words in the prompt, with a fresh HOME and XDG dirs under
# WORK, and copies the files each tool wrote itself into internal/index/source/testdata/<tool>/
# with a VERSION file (the tool, its version, how it was run). Claude Code, Codex and pi go to
# testdata/samples/<tool>/ (their adapters' tests do not read them). TOOL is any of: opencode
# qwen-code gemini crush claude-code codex pi (default: all). Network heavy (npm, the Go module
# proxy) and slow (the tools' system prompts are 7,000-20,000 tokens for a one-thread model):
# never part of .ci/run; the tests read the committed fixtures. See README.md.
#
# Environment: WORK (default /tmp/nexus-history-samples; the projects are WORK/<tool>/project,
# the path the fixtures record), PORT (default 8391; the Gemini shim listens on PORT+1),
# NEXUS_TEST_LLM_CACHE (tools/llm's cache), CRUSH_SRC (a source tree of Crush at CRUSH_VERSION to
# build when `go install` cannot fetch it).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
CRUSH_VERSION="${CRUSH_VERSION:-v0.90.0}"
WORK="${WORK:-/tmp/nexus-history-samples}"
PORT="${PORT:-8391}"
out="$repo/internal/index/source/testdata"
tools=("$@")
[ ${#tools[@]} -gt 0 ] || tools=(opencode qwen-code gemini crush claude-code codex pi)
mkdir -p "$WORK/bin"
bin="$here/node_modules/.bin"

log() { printf 'refresh: %s\n' "$*" >&2; }

# The prompt's marker word names the tool; the model's tool calls get junk string arguments,
# often "pwd", so a file of that name in the project gives a reading tool a real result, with
# a second marker word in it.
prompt() { echo "Please list the files here. Marker: axolotl$1"; }
project() {
	local dir="$WORK/$1/project"
	rm -rf "$WORK/$1"
	mkdir -p "$dir" "$WORK/$1/home"
	printf 'file contents marker: pangolin%s\n' "$1" >"$dir/pwd"
	git -C "$dir" init -q
	echo "$dir"
}
# version TOOL DIR VERSION HOW: the VERSION file beside a sample.
version() {
	mkdir -p "$2"
	printf 'tool: %s\nversion: %s\nmodel: tools/llm tiny model (llama-server), %s\nmade: %s by tools/history-samples/refresh.sh\nlicence: made here by the tool itself from the prompts in refresh.sh; no third-party text\n' \
		"$1" "$3" "$4" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$2/VERSION"
}
# sqlite_copy SRC DST: a consistent copy of a database the tool closed (its WAL included).
sqlite_copy() {
	rm -f "$2"
	python3 -c 'import sqlite3,sys; s=sqlite3.connect("file:"+sys.argv[1]+"?mode=ro", uri=True); d=sqlite3.connect(sys.argv[2]); s.backup(d); d.execute("VACUUM"); d.close()' "$1" "$2"
}
npm_version() { node -p "require('$here/node_modules/$1/package.json').version"; }

log "installing the pinned CLIs"
npm install --prefix "$here" --no-audit --no-fund >&2 # not ci: npm 11 leaves other platforms' optional packages out of the lock and ci then refuses it
if [[ " ${tools[*]} " == *" crush "* ]]; then
	if ! GOBIN="$WORK/bin" go install "github.com/charmbracelet/crush@$CRUSH_VERSION" >&2; then
		[ -n "${CRUSH_SRC:-}" ] || { log "go install of crush failed: set CRUSH_SRC to its source at $CRUSH_VERSION"; exit 1; }
		(cd "$CRUSH_SRC" && go build -o "$WORK/bin/crush" .) >&2
	fi
fi

log "starting the model server on $PORT"
bash "$repo/tools/llm/setup.sh" "${NEXUS_TEST_LLM_CACHE:-}" >/dev/null
# The tools' prompts are far over the model's 8192-token default: its context is raised (the
# model reads no position past what it was built for; answers stay the same).
llm_pid=$(bash "$repo/tools/llm/serve.sh" "$PORT" "${NEXUS_TEST_LLM_CACHE:-}" -c 65536 --override-kv llama.context_length=int:65536)
shim_pid=""
trap 'kill $llm_pid ${shim_pid:-} 2>/dev/null || true' EXIT
base="http://127.0.0.1:$PORT"

run_opencode() {
	local proj home v
	proj=$(project opencode) home="$WORK/opencode/home"
	cat >"$proj/opencode.json" <<-EOF
		{"provider": {"llama": {"npm": "@ai-sdk/openai-compatible", "name": "llama-server",
		  "options": {"baseURL": "$base/v1", "apiKey": "local"},
		  "models": {"tiny": {"name": "tiny", "tool_call": true}}}},
		 "model": "llama/tiny", "autoupdate": false, "share": "disabled"}
	EOF
	oc() {
		(cd "$proj" && HOME="$home" XDG_DATA_HOME="$home/.local/share" XDG_CONFIG_HOME="$home/.config" \
			XDG_CACHE_HOME="$home/.cache" XDG_STATE_HOME="$home/.local/state" OPENCODE_DISABLE_MODELS_FETCH=1 \
			OPENCODE_DISABLE_AUTOUPDATE=1 timeout 900 "$bin/opencode" run -m llama/tiny "$@") >&2 || true
	}
	oc "$(prompt opencode) 1"
	oc "$(prompt opencode) 2"
	# The first session again, as the index's resume command does (--session).
	oc --session "$(sqlite3 "$home/.local/share/opencode/opencode.db" 'SELECT id FROM session ORDER BY time_created LIMIT 1')" \
		"Resumed. Marker: okapiopencode"
	v=$(npm_version opencode-ai)
	mkdir -p "$out/opencode"
	sqlite_copy "$home/.local/share/opencode/opencode.db" "$out/opencode/opencode.db"
	version opencode "$out/opencode" "$v" "opencode run twice, then --session the first, provider @ai-sdk/openai-compatible"
}

run_qwen() {
	local proj home v
	proj=$(project qwen-code) home="$WORK/qwen-code/home"
	qw() {
		(cd "$proj" && HOME="$home" OPENAI_API_KEY=local OPENAI_BASE_URL="$base/v1" OPENAI_MODEL=tiny \
			QWEN_CODE_SUPPRESS_YOLO_WARNING=1 timeout 900 "$bin/qwen" --auth-type openai --yolo "$@") >&2 || true
	}
	qw -p "$(prompt qwen)"
	local id
	id=$(basename "$(ls "$home"/.qwen/projects/*/chats/*.jsonl | head -1)" .jsonl)
	qw --resume "$id" -p "Resumed. Marker: okapiqwen"
	v=$(npm_version @qwen-code/qwen-code)
	rm -rf "$out/qwen-code" && mkdir -p "$out/qwen-code"
	cp -r "$home/.qwen/projects" "$out/qwen-code/"
	version qwen-code "$out/qwen-code" "$v" "qwen -p, then --resume it, --auth-type openai (OPENAI_BASE_URL)"
}

run_gemini() {
	local proj home v
	proj=$(project gemini) home="$WORK/gemini/home"
	node "$repo/tools/llm/gemini-shim.mjs" "$((PORT + 1))" "$base/v1" >&2 &
	shim_pid=$!
	mkdir -p "$home/.gemini"
	echo '{"security":{"auth":{"selectedType":"gemini-api-key"}},"general":{"disableAutoUpdate":true},"privacy":{"usageStatisticsEnabled":false}}' \
		>"$home/.gemini/settings.json"
	gm() {
		(cd "$proj" && HOME="$home" GEMINI_API_KEY=local GOOGLE_GEMINI_BASE_URL="http://127.0.0.1:$((PORT + 1))" \
			GEMINI_CLI_TRUST_WORKSPACE=true timeout 900 "$bin/gemini" --yolo -m gemini-2.5-flash "$@") >&2 || true
	}
	gm -p "$(prompt gemini)"
	local id
	id=$(head -1 "$(ls "$home"/.gemini/tmp/*/chats/session-*.jsonl | head -1)" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).sessionId))')
	gm --resume "$id" -p "Resumed. Marker: okapigemini"
	kill "$shim_pid" 2>/dev/null || true
	shim_pid=""
	v=$(npm_version @google/gemini-cli)
	rm -rf "$out/gemini" && mkdir -p "$out/gemini"
	cp -r "$home/.gemini/tmp" "$out/gemini/"
	version gemini "$out/gemini" "$v" "gemini -p, then --resume it, through tools/llm/gemini-shim.mjs (GOOGLE_GEMINI_BASE_URL; Gemini API to chat completions)"
}

run_crush() {
	local proj home
	proj=$(project crush) home="$WORK/crush/home"
	mkdir -p "$home/.config/crush"
	cat >"$home/.config/crush/crush.json" <<-EOF
		{"providers": {"llama": {"type": "openai-compat", "base_url": "$base/v1", "api_key": "local",
		  "models": [{"id": "tiny", "name": "tiny", "context_window": 65536, "default_max_tokens": 512}]}},
		 "models": {"large": {"model": "tiny", "provider": "llama"}, "small": {"model": "tiny", "provider": "llama"}},
		 "options": {"disable_provider_auto_update": true}, "permissions": {"allowed_tools": []}}
	EOF
	cr() {
		(cd "$proj" && HOME="$home" XDG_CONFIG_HOME="$home/.config" XDG_DATA_HOME="$home/.local/share" \
			CRUSH_DISABLE_PROVIDER_AUTO_UPDATE=1 timeout 900 "$WORK/bin/crush" run -q "$@") >&2 || true
	}
	cr "$(prompt crush) 1"
	cr "$(prompt crush) 2"
	cr --session "$(sqlite3 "$proj/.crush/crush.db" 'SELECT id FROM sessions ORDER BY created_at, rowid LIMIT 1')" "Resumed. Marker: okapicrush"
	mkdir -p "$out/crush/.crush"
	sqlite_copy "$proj/.crush/crush.db" "$out/crush/.crush/crush.db"
	version crush "$out/crush" "$CRUSH_VERSION" "crush run twice, then --session the first, an openai-compat provider"
}

run_claude() {
	local proj home v
	proj=$(project claude-code) home="$WORK/claude-code/home"
	# IS_SANDBOX: Claude Code refuses to skip permissions as root (CI and this machine) otherwise.
	(cd "$proj" && HOME="$home" ANTHROPIC_BASE_URL="$base" ANTHROPIC_API_KEY=local DISABLE_AUTOUPDATER=1 IS_SANDBOX=1 \
		CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 timeout 900 "$bin/claude" -p "$(prompt claude)" --model tiny \
		--dangerously-skip-permissions) >&2 || true
	v=$(npm_version @anthropic-ai/claude-code)
	rm -rf "$out/samples/claude-code" && mkdir -p "$out/samples/claude-code"
	cp -r "$home/.claude/projects" "$out/samples/claude-code/"
	version claude-code "$out/samples/claude-code" "$v" "claude -p, ANTHROPIC_BASE_URL"
}

run_codex() {
	local proj home v
	proj=$(project codex) home="$WORK/codex/home"
	mkdir -p "$home/.codex"
	cat >"$home/.codex/config.toml" <<-EOF
		model = "tiny"
		model_provider = "llama"
		[model_providers.llama]
		name = "llama-server"
		base_url = "$base/v1"
		wire_api = "responses"
	EOF
	(cd "$proj" && HOME="$home" CODEX_HOME="$home/.codex" OPENAI_API_KEY=local timeout 900 "$bin/codex" exec \
		--skip-git-repo-check --dangerously-bypass-approvals-and-sandbox "$(prompt codex)") >&2 || true
	v=$(npm_version @openai/codex)
	rm -rf "$out/samples/codex" && mkdir -p "$out/samples/codex"
	cp -r "$home/.codex/sessions" "$out/samples/codex/"
	version codex "$out/samples/codex" "$v" "codex exec, a custom provider with wire_api = responses"
}

run_pi() {
	local proj home v
	proj=$(project pi) home="$WORK/pi/home"
	mkdir -p "$home/.pi/agent"
	cat >"$home/.pi/agent/models.json" <<-EOF
		{"providers": {"llama": {"baseUrl": "$base/v1", "api": "openai-completions", "apiKey": "local",
		  "models": [{"id": "tiny", "name": "tiny", "contextWindow": 65536, "maxTokens": 512}]}}}
	EOF
	(cd "$proj" && HOME="$home" PI_CODING_AGENT_DIR="$home/.pi/agent" timeout 900 "$bin/pi" -p \
		--provider llama --model tiny "$(prompt pi)") >&2 || true
	v=$(npm_version @mariozechner/pi-coding-agent)
	rm -rf "$out/samples/pi" && mkdir -p "$out/samples/pi"
	cp -r "$home/.pi/agent/sessions" "$out/samples/pi/"
	version pi "$out/samples/pi" "$v" "pi -p, a models.json provider (openai-completions)"
}

for t in "${tools[@]}"; do
	log "running $t"
	case "$t" in
	opencode) run_opencode ;;
	qwen-code) run_qwen ;;
	gemini) run_gemini ;;
	crush) run_crush ;;
	claude-code) run_claude ;;
	codex) run_codex ;;
	pi) run_pi ;;
	*) log "unknown tool $t"; exit 2 ;;
	esac
done
log "done: review git diff $out, then run go test ./internal/index/source/ and update the counts"
