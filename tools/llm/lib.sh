# Shared by setup.sh and serve.sh (sourced).

# llm_cache [DIR]: the cache directory, made absolute. The default is the tests' (Go's
# os.UserCacheDir, else the temporary directory, then nexus/test-llm).
llm_cache() {
	local base="${XDG_CACHE_HOME:-${HOME:+$HOME/.cache}}"
	local dir="${1:-${NEXUS_TEST_LLM_CACHE:-${base:-${TMPDIR:-/tmp}}/nexus/test-llm}}"
	mkdir -p "$dir" && (cd "$dir" && pwd)
}

# llm_model CACHE: the model's path, named by what builds it, so that an edit of the builder
# or of its pinned tokenizer builds a new one and clones of other versions keep theirs.
llm_model() {
	local sum
	sum=$(cat "$here/make-model.mjs" "$here/package-lock.json" | sha256sum | cut -c1-16)
	echo "$1/models/tiny-$sum.gguf"
}

# system_llama_server: llama-server from the machine's own packages, if any.
system_llama_server() {
	command -v llama-server 2>/dev/null || true
}

# llm_server CACHE ARGS...: runs llama-server (replacing the shell). The unpacked one runs
# under its own ld.so and libraries, from its CPU backends' directory: ggml picks the best
# libggml-cpu-*.so for this processor from the working directory.
llm_server() {
	local cache="$1" sys
	shift
	sys="$(system_llama_server)"
	if [ -n "$sys" ]; then
		exec "$sys" "$@"
	fi
	local lib="$cache/llama/usr/lib/x86_64-linux-gnu"
	cd "$lib/ggml/backends0"
	exec "$lib/ld-linux-x86-64.so.2" --library-path "$lib:$lib/llama" "$cache/llama/usr/bin/llama-server" "$@"
}
