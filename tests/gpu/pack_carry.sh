#!/usr/bin/env bash
# tests/gpu/pack_carry.sh — build the device check's binaries HERE and pack them, with the shared
# libraries the device image lacks, into .gpucarry/carry.tar.gz for the `run` tool's carry.
#
# Why: the device image (device README, KINDS.md: CUDA 13.0, nvcc, PyTorch; no registries) does
# not have the project's Debian libraries (OpenBLAS, SQLite, inih, cJSON, libmicrohttpd, ...), so
# minitrain cannot be built there. It is built here (make GPU=1, with MPI: a process not started
# by mpirun never calls MPI_Init, so libmpi only has to load and no Open MPI plugin tree is
# needed; `make GPU=1 MPICC=` would build without it), and every library ldd names is packed except the C library
# family (the image's glibc is newer), the CUDA driver and runtime, cuBLAS and NCCL (the image has
# its own; NCCL alone is 200 MB). The carry limit is 64 MiB; the script refuses to write more.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
B=build-gpu
nice -n 10 make -j2 GPU=1 BUILD=$B BIN=$B/minitrain $B/minitrain $B/tests/gpu/gpu_parity
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/bin" "$STAGE/lib"
cp $B/minitrain $B/tests/gpu/gpu_parity "$STAGE/bin/"
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libpthread|libdl\.|librt\.|libcuda\.|libcudart|libcublas|libnccl|libstdc\+\+|libgcc_s)'
ldd $B/minitrain $B/tests/gpu/gpu_parity | awk '/=> \// {print $1, $3}' | sort -u | while read -r name path; do
  if ! [[ $name =~ $skip ]]; then cp -L "$path" "$STAGE/lib/$name"; fi
done
echo "built $(date -u +%FT%TZ) from $(git rev-parse --short HEAD) on $(. /etc/os-release && echo "$PRETTY_NAME")" > "$STAGE/BUILD_INFO"
mkdir -p .gpucarry
grep -qx '/.gpucarry/' .git/info/exclude 2>/dev/null || echo '/.gpucarry/' >> "$(git rev-parse --git-path info/exclude)"
tar -czf .gpucarry/carry.tar.gz -C "$STAGE" .
size=$(stat -c %s .gpucarry/carry.tar.gz)
echo "packed $(ls "$STAGE/lib" | wc -l) libraries + 2 binaries: .gpucarry/carry.tar.gz, $((size / 1048576)) MiB"
if [ "$size" -gt $((60 * 1048576)) ]; then
  echo "pack_carry: over 60 MiB, the carry limit is 64 MiB: too large" >&2
  exit 1
fi
