#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds the container tests' images ahead of them: scripts/test runs this
# while it compiles, so that the debootstrap and the images' apt downloads
# (network-bound, a few minutes on a clean machine) overlap the compiles
# instead of holding a test slot. The tests then find the images in
# podman's layer cache. Exits 77 where the container tests would skip.
set -euo pipefail
# shellcheck source=tests/container/common.sh
. "$(dirname "$0")/common.sh"
container_setup
build_images --with-prometheus
