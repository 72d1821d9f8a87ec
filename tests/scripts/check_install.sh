#!/usr/bin/env bash
# Installs the build into a temporary prefix, then builds a consumer project
# against it twice: with CMake's find_package(outbox) and with pkg-config.
# The writer-only program must not link NATS. The man pages outboxd(8) and
# outboxctl(1) are installed and render.
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

# Man pages: installed where man looks, free of groff warnings and rendered
# by man -l (or, without groff, at least roff with a title and the sections).
for page in man8/outboxd.8 man1/outboxctl.1; do
  file=$prefix/share/man/$page
  name=$(basename "$page" | cut -d. -f1)
  if [ ! -s "$file" ]; then
    echo "FAIL cmake --install did not install share/man/$page"
    exit 1
  fi
  for section in NAME SYNOPSIS DESCRIPTION ENVIRONMENT "EXIT STATUS"; do
    if ! grep -q "^\.SH \"\?$section\"\?$" "$file"; then
      echo "FAIL share/man/$page has no $section section"
      exit 1
    fi
  done
  grep -q '^\.TH '"${name^^}"' ' "$file" || { echo "FAIL share/man/$page has no .TH ${name^^}"; exit 1; }
  grep -q 'OUTBOX_DATABASE_URL' "$file" || { echo "FAIL share/man/$page lists no settings"; exit 1; }
  if command -v groff >/dev/null && command -v man >/dev/null; then
    warnings=$(LC_ALL=C.UTF-8 groff -man -Tutf8 -ww -z "$file" 2>&1 || true)
    text=$(LC_ALL=C.UTF-8 MANWIDTH=80 man -l "$file" 2>/dev/null)
    if [ -n "$warnings" ]; then
      echo "FAIL groff warns about share/man/$page: $warnings"
      exit 1
    fi
    if ! grep -q "^${name^^}(" <<<"$text" || ! grep -q 'EXIT STATUS' <<<"$text"; then
      echo "FAIL man -l share/man/$page does not render its title and sections"
      exit 1
    fi
  else
    echo "groff or man absent: checked the roff structure of share/man/$page only"
  fi
done
echo "installed package works through find_package(outbox) and pkg-config; man pages render"
