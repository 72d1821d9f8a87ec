#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Makes the base images deploy/Dockerfile and deploy/test-images/ start
# FROM, debian:bookworm-slim and debian:bookworm, from Debian's packages
# when podman lacks them: no registry is reachable here (FACTS.md item 16).
# One debootstrap'd minbase serves both tags, trimmed the way Docker's slim
# image is (no docs, man pages or locales, no apt caches), so that what our
# layers add is measured against a comparable base. Images stay in podman's
# store, and the downloaded .debs in a cache directory, between runs.
# Usage: base-images.sh   (OUTBOX_REBUILD_BASE=1 makes them again)
set -euo pipefail

slim=docker.io/library/debian:bookworm-slim
full=docker.io/library/debian:bookworm
mirror=${OUTBOX_DEBIAN_MIRROR:-http://deb.debian.org/debian}
cache=${OUTBOX_CONTAINER_CACHE:-/var/cache/pgoutbox-container}

if [ "${OUTBOX_REBUILD_BASE:-0}" != 1 ] && podman image exists "$slim" &&
  podman image exists "$full"; then
  exit 0
fi

mkdir -p "$cache/debs"
rootfs=$(mktemp -d /var/tmp/pgoutbox-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT

echo "base-images: debootstrap bookworm minbase (about a minute)" >&2
debootstrap --variant=minbase --cache-dir="$cache/debs" bookworm "$rootfs" "$mirror" \
  >"$cache/debootstrap.log" 2>&1 || {
  tail -20 "$cache/debootstrap.log" >&2
  exit 1
}

# What Docker's debian images carry: the three suites, and apt/dpkg
# settings that keep caches, docs and translations out of image layers.
rm -f "$rootfs/etc/apt/sources.list"
cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<SOURCES
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${mirror%/debian}/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
cat >"$rootfs/etc/apt/apt.conf.d/docker-clean" <<'APT'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
APT
echo 'Acquire::Languages "none";' >"$rootfs/etc/apt/apt.conf.d/docker-no-languages"
echo 'APT::Install-Recommends "false";' >"$rootfs/etc/apt/apt.conf.d/docker-no-recommends"
cat >"$rootfs/etc/dpkg/dpkg.cfg.d/docker" <<'DPKG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
DPKG
find "$rootfs/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
find "$rootfs/usr/share/doc" -mindepth 1 -type d -empty -delete
rm -rf "$rootfs"/usr/share/{man,info,groff,lintian,linda}/* "$rootfs"/var/lib/apt/lists/* \
  "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/log/* "$rootfs"/tmp/*
find "$rootfs/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias \
  -exec rm -rf {} +

tar --numeric-owner -C "$rootfs" -c . |
  podman import --change 'CMD ["bash"]' - "$slim" >/dev/null
podman tag "$slim" "$full"
echo "base-images: $slim and $full made ($(podman image inspect -f '{{.Size}}' "$slim") bytes)" >&2
