#!/usr/bin/env bash
# Installs hsnn from BUILD_DIR into a scratch prefix, builds examples/consumer
# against the installed package only, and runs it.
set -euo pipefail
build="$1" src="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" > /dev/null
cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$work/build" > /dev/null
HSNN_CACHE_DIR="$work/cache" LD_DEBUG=files LD_DEBUG_OUTPUT="$work/ld" "$work/build/consumer"
# The installed code generator module, not the build tree's.
loaded=$(cat "$work"/ld.* | grep -o 'file=/[^ ]*libhsnn-codegen.so' | sort -u)
[ "$loaded" = "file=$work/prefix/lib/hsnn/libhsnn-codegen.so" ] || { echo "error: loaded '$loaded'"; exit 1; }
"$work/prefix/bin/hsnn-jit" info | grep -Fx "code generator: $work/prefix/lib/hsnn/libhsnn-codegen.so"
# Results cannot be ignored: the file that drops three must fail, on each.
if cmake --build "$work/build" --target ignored_result > "$work/ignored.log" 2>&1; then
  echo "error: ignored_result.cpp compiled: hsnn results can be ignored"; exit 1
fi
n=$(grep -c "error: ignoring return" "$work/ignored.log" || true)
[ "$n" -ge 3 ] || { echo "error: expected 3 ignored-result errors, got $n"; cat "$work/ignored.log"; exit 1; }
echo "ignored results are errors: $n"
test -x "$work/prefix/bin/hsnn-jit"
"$work/prefix/bin/hsnn-jit" --version
