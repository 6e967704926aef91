#!/usr/bin/env bash
# Installs Debian's zsh and fish when missing: internal/cli's completion_shells.txtar loads nexus's
# completion scripts in those shells, and under CI a missing shell fails the test. Also ripgrep:
# bench/history's tests check its ripgrep baseline against a plain scan.
set -euo pipefail
missing=()
for p in zsh:zsh fish:fish rg:ripgrep; do
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
