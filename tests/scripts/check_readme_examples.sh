#!/usr/bin/env bash
# Every C example in the README and the guides compiles against the public
# headers, with the project's warnings, and links against the two libraries:
# each ```c block is a whole translation unit, so what a reader copies builds.
# Usage: check_readme_examples.sh INCLUDE_DIR LIB_DIR DOC...
set -euo pipefail
include_dir=$1
lib_dir=$2
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for doc in "$@"; do
  tag=$(basename "$doc" .md)
  awk -v dir="$work" -v tag="$tag" '
    /^```c$/ { n++; out = sprintf("%s/%s_%d.c", dir, tag, n); on = 1; next }
    /^```/ && on { on = 0; close(out); next }
    on { print > out }
  ' "$doc"
  if ! compgen -G "$work/${tag}_*.c" >/dev/null; then
    echo "FAIL no \`\`\`c example in $doc"
    exit 1
  fi
done
examples=("$work"/*.c)
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
echo "${#examples[@]} C examples of $# documents compile and link"
