#!/usr/bin/env bash
# Every C example in the README compiles against the public headers, with
# the project's warnings, and links against the two libraries: each ```c
# block is a whole translation unit, so what a reader copies builds.
set -euo pipefail
readme=$1
include_dir=$2
lib_dir=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

awk -v dir="$work" '
  /^```c$/ { n++; out = sprintf("%s/example_%d.c", dir, n); on = 1; next }
  /^```/ && on { on = 0; close(out); next }
  on { print > out }
' "$readme"
examples=("$work"/example_*.c)
if [ ! -e "${examples[0]}" ]; then
  echo "FAIL no \`\`\`c example in $readme"
  exit 1
fi
flags=(-std=c11 -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Werror
       -fPIC -I"$include_dir" $(pkg-config --cflags libpq jansson))
objects=()
for src in "${examples[@]}"; do
  cc "${flags[@]}" -c "$src" -o "${src%.c}.o"
  objects+=("${src%.c}.o")
done
# Linked as one library with no undefined symbol: every function an example calls exists.
cc -shared -Wl,--no-undefined -o "$work/examples.so" "${objects[@]}" -L"$lib_dir" \
   -loutbox-worker -loutbox $(pkg-config --libs libpq jansson)
echo "${#examples[@]} README examples compile and link"
