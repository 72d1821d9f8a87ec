#!/usr/bin/env bash
# Installs the build into a temporary prefix, then builds a consumer project
# against it twice: with CMake's find_package(outbox) and with pkg-config.
# The writer-only program must not link NATS.
set -euo pipefail
build_dir=$1
consumer_src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

cmake --install "$build_dir" --prefix "$prefix" >/dev/null
libdir=$(find "$prefix" -name 'liboutbox.so' -printf '%h\n' | head -n1)
export LD_LIBRARY_PATH=$libdir

# A sanitized build's libraries need the sanitizer runtimes loaded first by
# the (unsanitized) consumer programs.
run() {
  local preload
  preload=$(ldd "$libdir/liboutbox-worker.so" | awk '/libasan|libubsan/ {print $3}' | paste -sd: -)
  LD_PRELOAD=$preload ASAN_OPTIONS=detect_leaks=0 "$@"
}

cmake -S "$consumer_src" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/cmake" >/dev/null
run "$work/cmake/writer_only" | grep -q '"schema_version":1'
run "$work/cmake/with_worker" | grep -q 'worker ok OUTBOX_OK batch_size=250'
if ldd "$work/cmake/writer_only" | grep -q libnats; then
  echo "FAIL writer_only links libnats"
  exit 1
fi

export PKG_CONFIG_PATH=$libdir/pkgconfig
cc -o "$work/pc_writer" "$consumer_src/writer_only.c" $(pkg-config --cflags --libs outbox)
cc -o "$work/pc_worker" "$consumer_src/with_worker.c" $(pkg-config --cflags --libs outbox-worker)
run "$work/pc_writer" | grep -q '"schema_version":1'
run "$work/pc_worker" | grep -q 'worker ok OUTBOX_OK batch_size=250'
echo "installed package works through find_package(outbox) and pkg-config"
