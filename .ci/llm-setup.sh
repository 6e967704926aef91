#!/usr/bin/env bash
# Installs what ../shared/llm/setup.sh and serve.sh need when missing (Debian's nodejs, npm and
# curl; apt-get and dpkg come with the system): internal/provider's tests run llama.cpp's
# llama-server with a tiny model built by setup.sh, and under CI a missing tool fails them.
# setup.sh itself installs nothing system-wide (it unpacks llama.cpp under its cache directory).
set -euo pipefail
missing=()
for p in node:nodejs npm:npm curl:curl; do
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
