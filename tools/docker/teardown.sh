#!/usr/bin/env bash
# teardown.sh DIR — undoes setup.sh DIR: removes the daemon's containers, stops its dockerd and
# any containerd or shim it left, kills what is left in its cgroups, unmounts what is left under
# DIR, removes its cgroups and the empty /run directories it made, then DIR itself. The
# packages stay installed. Safe to run twice, or after a setup that failed halfway.
set -uo pipefail
say() { echo "docker-teardown: $*" >&2; }
[ "$(id -u)" = 0 ] || { say "needs root"; exit 1; }
[ -n "${1:-}" ] || { say "usage: teardown.sh DIR"; exit 1; }
[ -d "$1" ] || { say "$1: nothing to do"; exit 0; }
dir="$(cd "$1" && pwd -P)"
if [ "$dir" = / ] || ! [ -e "$dir/.nexus-dockertest" ]; then
	say "$dir was not made by setup.sh (no .nexus-dockertest in it): left alone"
	exit 1
fi
exec_root=$(cat "$dir/exec-root" 2>/dev/null || echo "$dir/exec")
sock=$(cat "$dir/socket" 2>/dev/null || echo "$dir/docker.sock")
cgroup=$(cat "$dir/cgroup-parent" 2>/dev/null || true)
unset DOCKER_CONTEXT DOCKER_TLS_VERIFY DOCKER_CERT_PATH
export DOCKER_HOST="unix://$sock"

gone() { # pid seconds: waits for pid to end
	local i
	for i in $(seq $(($2 * 10))); do
		kill -0 "$1" 2>/dev/null || return 0
		sleep 0.1
	done
	return 1
}
stop() { # pid seconds: TERM, then KILL
	kill -TERM "$1" 2>/dev/null
	gone "$1" "$2" || { kill -KILL "$1" 2>/dev/null; gone "$1" 5; }
}

# Containers first, killed outright: dockerd would otherwise wait out their stop timeouts.
if [ -S "$sock" ] && command -v docker >/dev/null; then
	ids=$(timeout 20 docker ps -aq 2>/dev/null)
	[ -z "$ids" ] || timeout 60 docker rm -f $ids >/dev/null 2>&1
fi
if [ -s "$dir/docker.pid" ]; then
	pid=$(cat "$dir/docker.pid")
	[ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ] && stop "$pid" 30 && say "dockerd $pid stopped"
fi
# containerd and shims of this daemon: their command lines name its exec root.
for p in /proc/[0-9]*; do
	case "$(cat "$p/comm" 2>/dev/null)" in containerd*) ;; *) continue ;; esac
	tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qF "$exec_root/containerd/" || continue
	stop "${p#/proc/}" 10
done
if [ -n "$cgroup" ]; then
	# Processes of containers whose shim is gone; a paused one is thawed first so it can die.
	find /sys/fs/cgroup -maxdepth 8 -path "*/$cgroup/*" -name freezer.state -exec sh -c 'echo THAWED >"$1"' _ {} \; 2>/dev/null
	pids=$(find /sys/fs/cgroup -maxdepth 8 -path "*/$cgroup/*" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -un)
	for p in $pids; do kill -KILL "$p" 2>/dev/null; done
	for p in $pids; do gone "$p" 5; done
fi
for root in "$dir" "$exec_root"; do
	awk -v p="$root/" 'index($5, p) == 1 { print $5 }' /proc/self/mountinfo | sort -r |
		while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done
done
if [ -n "$cgroup" ]; then
	find /sys/fs/cgroup -maxdepth 6 -type d -name "$cgroup" 2>/dev/null |
		while read -r c; do find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null; done
fi
# The fixed /run directories: those this daemon made, or all of them when no dockerd is left.
others=0
for c in /proc/[0-9]*/comm; do [ "$(cat "$c" 2>/dev/null)" = dockerd ] && others=1 && break; done
for d in /run/docker/plugins /run/docker /run/containerd/s /run/containerd; do
	[ -d "$d" ] || continue
	if [ $others = 0 ] || grep -qxF "$d" "$dir/host-created" 2>/dev/null; then rmdir "$d" 2>/dev/null; fi
done
case $exec_root in /run/nexus-dockertest-*) rm -rf --one-file-system "$exec_root" ;; esac
rm -rf --one-file-system "$dir"
[ ! -e "$dir" ] || { say "could not remove all of $dir"; exit 1; }
say "removed $dir"
