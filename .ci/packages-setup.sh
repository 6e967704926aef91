#!/usr/bin/env bash
# Installs the Debian packages the tests need when their commands are missing, and under CI a
# missing one fails its test:
#   zsh, fish   internal/cli's completion_shells.txtar loads nexus's completion scripts in them;
#   rg          bench/history's tests check its ripgrep baseline against a plain scan;
#   node, npm, curl  tools/llm/setup.sh and serve.sh, the real model server of
#               internal/provider's, internal/agent's and internal/cli's tests (setup.sh
#               installs nothing system-wide: it unpacks llama.cpp under its cache directory);
#   busybox     internal/shell's framing tests run its ash (the static build, which the
#               Docker tests' busybox image is made of);
#   chromium    the web console's end-to-end tests drive it with playwright-core (web/).
set -euo pipefail
missing=()
for p in zsh:zsh fish:fish rg:ripgrep node:nodejs npm:npm curl:curl busybox:busybox-static chromium:chromium; do
	command -v "${p%%:*}" >/dev/null 2>&1 || missing+=("${p#*:}")
done
if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi
sudo=()
if [ "$(id -u)" -ne 0 ]; then
	sudo=(sudo -n)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
