#!/usr/bin/env bash
# serve.sh PORT CACHE [llama-server arguments...] — starts llama-server with the test model on
# 127.0.0.1:PORT in the background (set up first by setup.sh CACHE), waits until its /health
# answers, and prints its pid (stop it with kill PID). Its log: CACHE/logs/llama-server.PORT.log.
# It speaks OpenAI chat completions and Anthropic messages, streaming and tools (--jinja: the
# model's own chat template and llama-server's tool-call grammar). Extra arguments follow the
# defaults and override them (-c 512 provokes context overflows).
#   -t 1 -tb 1: on a 2-core machine a second ggml thread spins waiting for the first and makes
#   decoding tens of times slower; -np 1: one request at a time, in order, as the tests expect.
set -euo pipefail
port="${1:?usage: serve.sh PORT CACHE [llama-server args...]}"
[ $# -ge 2 ] || { echo "usage: serve.sh PORT CACHE [llama-server args...]" >&2; exit 2; }
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=tools/llm/lib.sh
. "$here/lib.sh"
cache="$(llm_cache "$2")"
shift 2
model="$(llm_model "$cache")"
[ -s "$model" ] || { echo "serve.sh: no model at $model: run tools/llm/setup.sh $cache first" >&2; exit 1; }
mkdir -p "$cache/logs"
log="$cache/logs/llama-server.$port.log"
(llm_server "$cache" -m "$model" -a tiny --host 127.0.0.1 --port "$port" --jinja -c 8192 \
	-t 1 -tb 1 -np 1 "$@") </dev/null >"$log" 2>&1 &
pid=$!
# The subshell execs llama-server, so $! is the server itself.
for _ in $(seq 600); do
	if [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health" 2>/dev/null)" = 200 ]; then
		echo "$pid"
		exit 0
	fi
	if ! kill -0 "$pid" 2>/dev/null; then
		echo "serve.sh: llama-server exited (log $log):" >&2
		tail -n 20 "$log" >&2
		exit 1
	fi
	sleep 0.2
done
echo "serve.sh: llama-server did not answer /health within 120 s (log $log)" >&2
kill "$pid"
exit 1
