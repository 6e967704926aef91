#!/usr/bin/env bash
# setup.sh DIR [bookworm|busybox] — the Docker engine of the docker transport's tests
# (internal/shell/docker_test.go): Debian's docker.io with a dockerd of its own, and a test image
# built here from Debian packages, since the tests reach no image registry.
#   - Installs docker.io, and debootstrap (bookworm) or busybox-static (busybox), when missing.
#   - Starts dockerd with everything under DIR: its socket, data root, exec root, pid file and
#     config; host networking untouched (no bridge, no iptables or forwarding rules: containers
#     get only lo, run them with --network none); its containers in cgroup nexus-dockertest-N.
#   - Builds and imports the image: bookworm: a debootstrap minbase with bash and git
#     (nexus-test:bookworm, about a minute the first time); busybox: the static busybox and its
#     applet links (nexus-test:busybox, seconds).
# Prints DOCKER_HOST=... and NEXUS_TEST_IMAGE=... on stdout, nothing else; progress on stderr.
# Idempotent: a second call finds the daemon and the image and answers in under a second, which
# is why the tests leave the daemon running. teardown.sh DIR stops it and removes DIR.
# Needs root. DEBIAN_MIRROR overrides the mirror read from /etc/apt.
set -euo pipefail
say() { echo "docker-setup: $*" >&2; }
die() { say "$*"; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (it starts a dockerd)"
dir="${1:?usage: setup.sh DIR [bookworm|busybox]}"
variant="${2:-bookworm}"
case $variant in bookworm | busybox) ;; *) die "unknown image $variant (bookworm or busybox)" ;; esac
mkdir -p "$dir"
dir="$(cd "$dir" && pwd -P)"
[ "$dir" != / ] || die "will not use / as its directory"
touch "$dir/.nexus-dockertest" # teardown.sh removes only a directory carrying this
exec 9>"$dir/.setup.lock"
flock 9 # the tests of several packages may set up at once

# Paths dockerd uses, written down for teardown.sh. A unix socket path has at most 108 bytes
# and containerd's ttrpc socket lives deep in the exec root: a long DIR moves both to /run.
key=$(printf %s "$dir" | cksum | cut -d' ' -f1)
exec_root="$dir/exec"
[ ${#exec_root} -le 60 ] || exec_root="/run/nexus-dockertest-$key"
sock="$dir/docker.sock"
[ ${#sock} -le 100 ] || sock="$exec_root/docker.sock"
cgroup="nexus-dockertest-$key"
echo "$exec_root" >"$dir/exec-root"
echo "$sock" >"$dir/socket"
echo "$cgroup" >"$dir/cgroup-parent"
unset DOCKER_CONTEXT DOCKER_TLS_VERIFY DOCKER_CERT_PATH
export DOCKER_HOST="unix://$sock"
image="nexus-test:$variant"

# 1. packages
need=(docker.io)
if [ "$variant" = bookworm ]; then need+=(debootstrap); else need+=(busybox-static); fi
missing=()
for p in "${need[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	say "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >&2
	# Without systemd the package starts no system dockerd.
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# 2. the daemon
answers() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }
running() { [ -s "$dir/docker.pid" ] && kill -0 "$(cat "$dir/docker.pid")" 2>/dev/null; }
if running && answers; then
	:
elif running; then
	die "dockerd $(cat "$dir/docker.pid") runs but does not answer on $sock; teardown.sh $dir first"
else
	rm -f "$dir/docker.pid" "$sock"
	# dockerd and containerd make a few directories at fixed paths; teardown.sh removes those
	# this daemon made (when empty).
	if ! [ -f "$dir/host-created" ]; then
		for d in /run/docker/plugins /run/docker /run/containerd/s /run/containerd; do
			[ -e "$d" ] || echo "$d"
		done >"$dir/host-created"
	fi
	# An own config file: /etc/docker/daemon.json is not read, the key goes into DIR.
	echo "{\"deprecated-key-path\": \"$dir/key.json\"}" >"$dir/daemon.json"
	mkdir -p "$dir/data" "$exec_root"
	start=$(date +%s%N)
	# 9>&-: the daemon must not hold the setup lock.
	setsid dockerd --host "unix://$sock" --data-root "$dir/data" --exec-root "$exec_root" \
		--pidfile "$dir/docker.pid" --config-file "$dir/daemon.json" \
		--iptables=false --ip-forward=false --ip-masq=false --bridge=none \
		--cgroup-parent "$cgroup" --exec-opt native.cgroupdriver=cgroupfs \
		${DOCKER_STORAGE_DRIVER:+--storage-driver "$DOCKER_STORAGE_DRIVER"} \
		</dev/null >>"$dir/dockerd.log" 2>&1 9>&- &
	pid=$!
	for _ in $(seq 600); do
		answers && break
		kill -0 "$pid" 2>/dev/null || { tail -n 20 "$dir/dockerd.log" >&2; die "dockerd exited (log $dir/dockerd.log)"; }
		sleep 0.05
	done
	answers || { tail -n 20 "$dir/dockerd.log" >&2; die "dockerd did not answer within 30 s"; }
	say "dockerd $pid up in $((($(date +%s%N) - start) / 1000000)) ms"
fi

# 3. the image
mirror() { # the machine's Debian mirror for suite $1
	if [ -n "${DEBIAN_MIRROR:-}" ]; then
		echo "$DEBIAN_MIRROR"
	elif [ -r /etc/apt/sources.list.d/debian.sources ]; then
		# deb822 stanzas: the URIs of one whose Suites name $1
		awk -v s="$1" 'BEGIN { RS = ""; FS = "\n" } {
			uri = ""; hit = 0
			for (i = 1; i <= NF; i++) {
				n = split($i, f, /[ \t]+/)
				if (f[1] == "URIs:") uri = f[2]
				if (f[1] == "Suites:") for (j = 2; j <= n; j++) if (f[j] == s) hit = 1
			}
			if (hit && uri != "") { print uri; exit }
		}' /etc/apt/sources.list.d/debian.sources
	elif [ -r /etc/apt/sources.list ]; then
		awk -v s="$1" '$1 == "deb" { for (i = 2; i < NF; i++) if ($i ~ /^[a-z]+:\/\//) { if ($(i + 1) == s) { print $i; exit } break } }' /etc/apt/sources.list
	fi
}
unmount_below() { # debootstrap mounts /proc and friends inside the root it builds
	awk -v p="$1/" 'index($5, p) == 1 { print $5 }' /proc/self/mountinfo | sort -r |
		while read -r m; do umount "$m" 2>/dev/null || umount -l "$m"; done
}
if ! docker image inspect "$image" >/dev/null 2>&1; then
	start=$(date +%s)
	root="$dir/rootfs-$variant"
	unmount_below "$root"
	rm -rf --one-file-system "$root"
	mkdir -p "$root"
	if [ "$variant" = busybox ]; then
		bb=/bin/busybox
		ldd "$bb" >/dev/null 2>&1 && die "$bb is dynamically linked: the image needs Debian's busybox-static"
		mkdir -p "$root"/{bin,etc,root,tmp,proc,sys,dev}
		chmod 1777 "$root/tmp"
		cp "$bb" "$root/bin/busybox"
		for applet in $("$bb" --list); do
			[ "$applet" = busybox ] || ln -s busybox "$root/bin/$applet"
		done
		echo 'root:x:0:0:root:/root:/bin/sh' >"$root/etc/passwd"
		echo 'root:x:0:' >"$root/etc/group"
	else
		# shellcheck source=/dev/null
		suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
		url=$(mirror "$suite")
		[ -n "$url" ] || die "no Debian mirror for $suite in /etc/apt (set DEBIAN_MIRROR)"
		say "building $image: debootstrap $suite from $url"
		if ! debootstrap --variant=minbase --include=bash,git "$suite" "$root" "$url" >"$dir/debootstrap.log" 2>&1; then
			unmount_below "$root"
			tail -n 20 "$dir/debootstrap.log" >&2
			die "debootstrap failed (log $dir/debootstrap.log)"
		fi
		unmount_below "$root"
		# As Debian's own images: no package cache, no indexes.
		rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin "$root"/var/lib/apt/lists/*_* "$root"/debootstrap
	fi
	tar --numeric-owner -C "$root" -c . |
		docker import -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' -c 'CMD ["/bin/sh"]' - "$image" >/dev/null
	rm -rf --one-file-system "$root"
	say "$image built in $(($(date +%s) - start)) s"
fi

echo "DOCKER_HOST=unix://$sock"
echo "NEXUS_TEST_IMAGE=$image"
