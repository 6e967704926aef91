#!/usr/bin/env bash
# setup.sh [CACHE] — makes nexus's real model server ready for the tests
# (internal/testkit/llmserver): llama.cpp's llama-server from Debian and the tiny test model
# that make-model.mjs builds. Idempotent; prints the llama-server version and the model's path.
#   CACHE (default: NEXUS_TEST_LLM_CACHE, else ~/.cache/nexus/test-llm, as the tests) holds
#   what is not in the clone, shared by every clone:
#     llama/      Debian's llama.cpp-tools and the libraries it needs, unpacked (dpkg -x):
#                 the package is only in Debian testing, built against a newer glibc than
#                 bookworm's, so it runs with its own ld.so; nothing is installed system-wide.
#                 A llama-server already on PATH (Debian testing: apt-get install
#                 llama.cpp-tools) is used instead.
#     models/     tiny-HASH.gguf, HASH naming make-model.mjs and package-lock.json.
#   tools/llm/node_modules: the tokenizer package, pinned (npm ci).
# Needs bash, node and npm, and for the unpacked llama-server apt-get, dpkg and a Debian mirror
# in /etc/apt (the machine's own). Cold: about 20 s and 180 MB; warm: under a second.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=tools/llm/lib.sh
. "$here/lib.sh"
cache="$(llm_cache "${1:-}")"
mkdir -p "$cache"
exec 8>"$cache/.setup.lock"
flock 8 # test binaries of several packages set up at once; one works, the others wait

# The version the tests were last checked against; a mirror that has moved on gives its own,
# said on stderr (the tests check behaviour, not the version).
llama_version='1:0.7.0+dfsg-2'
suite=forky
packages=(llama.cpp-tools libllama0 libggml0 libc6 libgcc-s1 libstdc++6 libgomp1 libssl3t64 libzstd1 zlib1g)

debian_mirror() {
	local uri=""
	if [ -r /etc/apt/sources.list.d/debian.sources ]; then
		uri=$(awk '$1 == "URIs:" { print $2; exit }' /etc/apt/sources.list.d/debian.sources)
	fi
	if [ -z "$uri" ] && [ -r /etc/apt/sources.list ]; then
		uri=$(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^https?:\/\//) { print $i; exit } }' /etc/apt/sources.list)
	fi
	[ -n "$uri" ] || { echo "setup.sh: no Debian mirror in /etc/apt to fetch llama.cpp-tools from" >&2; return 1; }
	echo "${uri%/}"
}

install_llama() {
	local apt="$cache/apt" root="$cache/llama.tmp"
	rm -rf "$apt" "$root"
	mkdir -p "$apt/lists/partial" "$apt/archives/partial" "$apt/debs" "$root"
	: >"$apt/status"
	echo "deb $(debian_mirror) $suite main" >"$apt/sources.list"
	# A private apt state: this reads the suite's index without touching the machine's.
	local opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
		-o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt" -o "Dir::State::status=$apt/status"
		-o APT::Sandbox::User=root)
	apt-get "${opts[@]}" -qq update
	local want=() p
	for p in "${packages[@]}"; do
		case $p in llama.cpp-tools | libllama0) want+=("$p=$llama_version") ;; *) want+=("$p") ;; esac
	done
	if ! (cd "$apt/debs" && apt-get "${opts[@]}" -qq download "${want[@]}" 2>/dev/null); then
		echo "setup.sh: $suite no longer has llama.cpp $llama_version; taking its current one" >&2
		(cd "$apt/debs" && rm -f ./*.deb && apt-get "${opts[@]}" -qq download "${packages[@]}")
	fi
	for p in "$apt"/debs/*.deb; do dpkg -x "$p" "$root"; done
	(cd "$apt/debs" && ls) >"$root/VERSIONS"
	rm -rf "$cache/llama" "$apt"
	mv "$root" "$cache/llama"
}

if [ -z "$(system_llama_server)" ] && ! [ -x "$cache/llama/usr/bin/llama-server" ]; then
	for tool in apt-get dpkg; do
		command -v "$tool" >/dev/null || { echo "setup.sh: $tool is missing: llama-server comes from Debian's llama.cpp-tools" >&2; exit 1; }
	done
	start=$(date +%s)
	install_llama
	echo "setup.sh: llama.cpp-tools unpacked in $(($(date +%s) - start))s ($(du -sh "$cache/llama" | cut -f1))" >&2
fi

if ! cmp -s "$here/package-lock.json" "$here/node_modules/.nexus-package-lock.json"; then
	npm ci --prefix "$here" --no-audit --no-fund --loglevel=error >&2
	cp "$here/package-lock.json" "$here/node_modules/.nexus-package-lock.json"
fi

model="$(llm_model "$cache")"
if ! [ -s "$model" ]; then
	mkdir -p "$(dirname "$model")"
	(cd "$here" && node make-model.mjs "$model.tmp") >&2
	mv "$model.tmp" "$model"
fi

if ! version=$( (llm_server "$cache" --version) 2>&1); then
	echo "setup.sh: llama-server does not run: $version" >&2
	exit 1
fi
echo "$version" | grep -m1 '^version' || true
echo "model: $model"
