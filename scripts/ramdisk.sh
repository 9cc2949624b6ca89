#!/usr/bin/env bash
# Mounts a RAM disk for the event builder's files that keeps them in large pages
# (tmpfs huge=within_size): about half the kernel CPU of writing and deleting them on a
# 4 KiB-page tmpfs such as a default /dev/shm (BENCHMARKS.md, "RAM disk pages").
# Usage (as root): scripts/ramdisk.sh DIR [SIZE]   e.g. scripts/ramdisk.sh /mnt/swdaq-ramdisk 16g
# then set evb.output under DIR. `umount DIR` removes it and everything in it.
set -euo pipefail
dir=${1:?usage: scripts/ramdisk.sh DIR [SIZE]}
size=${2:-50%}
if mountpoint -q "$dir"; then
    echo "ramdisk: $dir is already a mount point; not mounting over it" >&2
    exit 1
fi
mkdir -p "$dir"
mount -t tmpfs -o "size=$size,huge=within_size,mode=1777" swdaq-ramdisk "$dir"
grep " $dir " /proc/self/mountinfo >&2
