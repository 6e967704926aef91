#!/usr/bin/env bash
# Installs Debian's openssh-server when /usr/sbin/sshd is missing. The SSH transport's tests
# (internal/shell/ssh_test.go) start their own sshd on a loopback port with a throwaway host
# key, authorized_keys and config, and a temporary HOME with known rc files; run as root they
# log in as a system user of their own (nexus-sshtest, created on first use). They need only
# the binary. Without root (or password-less sudo) nothing can be installed: the script says so
# and the tests skip with the same advice (under CI they fail).
set -euo pipefail
if [ -x /usr/sbin/sshd ]; then
	exit 0
fi
sudo=()
if [ "$(id -u)" -ne 0 ]; then
	if ! command -v sudo >/dev/null 2>&1 || ! sudo -n true 2>/dev/null; then
		echo "sshd-setup: /usr/sbin/sshd is missing and this user cannot install openssh-server" \
			"(not root, no password-less sudo); the SSH transport tests will be skipped" >&2
		exit 0
	fi
	sudo=(sudo -n)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends openssh-server
test -x /usr/sbin/sshd
echo "sshd-setup: installed $(/usr/sbin/sshd -V 2>&1 | head -n1 || true)"
