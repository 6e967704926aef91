#!/usr/bin/env bash
# Brings up the private Docker engine the docker transport's tests use (internal/shell), so that
# `make test` finds it running: the repository's tools/docker/setup.sh installs Debian's
# docker.io, starts a dockerd of its own under /tmp/nexus-dockertest (its own socket and data
# root, host networking untouched) and builds the test images locally (bookworm with bash and
# git, busybox). The tests call the same script with the same directory; a second call reuses the
# daemon in under a second. The daemon is left running for the next run; stop it with
#   bash tools/docker/teardown.sh /tmp/nexus-dockertest
# Without root the tests skip, and fail under CI.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
	echo "docker-setup: not root, cannot start a dockerd; the Docker transport tests will be skipped (they fail under CI)" >&2
	exit 0
fi
echo "docker-setup: starting the test Docker engine (the first time: docker.io install and image builds, 1 to 3 minutes)" >&2
start=$(date +%s)
for variant in bookworm busybox; do
	bash tools/docker/setup.sh "${NEXUS_TEST_DOCKER_DIR:-/tmp/nexus-dockertest}" "$variant" >/dev/null
done
echo "docker-setup: ready in $(($(date +%s) - start))s" >&2
