#!/usr/bin/env bash
# Build the Debian bookworm root filesystem that every runner image starts FROM, as a tarball.
# Offline-friendly: debootstrap fetches .deb files from the machine's configured Debian mirror
# (debootstrap's default); the result is cached, so a second build costs nothing.
#   usage: images/rootfs/build.sh OUT.tar
set -euo pipefail
out=${1:?usage: build.sh OUT.tar}
suite=${RUNNER_SUITE:-bookworm}
packages=python3,python3-venv,python3-distutils,python3-lib2to3,bash,coreutils,git,curl,ca-certificates,procps,util-linux,findutils,grep,sed,tar,gzip,xz-utils,less,patch,diffutils
[ "$(id -u)" = 0 ] || { echo "rootfs: debootstrap needs root" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "rootfs: debootstrap is missing (apt-get install debootstrap)" >&2; exit 1; }
work=$(mktemp -d /var/tmp/runner-rootfs.XXXXXX)
trap 'rm -rf "$work"' EXIT
echo "rootfs: debootstrap $suite (minbase + $packages) into $work; this takes a few minutes" >&2
# --variant=minbase keeps it small; a log line per package shows progress.
debootstrap --variant=minbase --include="$packages" "$suite" "$work/root" >&2
chroot "$work/root" apt-get clean
rm -rf "$work/root"/var/lib/apt/lists/* "$work/root"/var/cache/apt/*.bin "$work/root"/usr/share/doc/* \
       "$work/root"/usr/share/man/* "$work/root"/usr/share/locale/*
tar --numeric-owner -C "$work/root" -cf "$out.part" .
mv "$out.part" "$out"
echo "rootfs: wrote $out ($(du -h "$out" | cut -f1))" >&2
