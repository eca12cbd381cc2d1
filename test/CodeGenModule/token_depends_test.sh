#!/usr/bin/env bash
# The code generator module's build token hashes the headers the library
# and the module share, at configure time: the build system must re-run
# CMake when one of them changes (not only when one is added or removed),
# or an edited layout keeps the old token and an old module passes for new.
# usage: token_depends_test.sh BUILD_DIR SOURCE_DIR
set -u
BUILD=$1 SRC=$2
if [ -f "$BUILD/build.ninja" ]; then
  deps=$(awk '/^build build.ninja: RERUN_CMAKE/{p=1} p{print; if (!/\$$/) exit}' "$BUILD/build.ninja")
elif [ -f "$BUILD/CMakeFiles/Makefile.cmake" ]; then
  deps=$(cat "$BUILD/CMakeFiles/Makefile.cmake")
else
  echo "SKIPPED: neither build.ninja nor CMakeFiles/Makefile.cmake in $BUILD"
  exit 77
fi
fail=0
for h in lib/CodeGen/KernelSpec.h lib/CodeGen/MathEmitter.h include/hsnn/Layer.h lib/Program/KernelKinds.def; do
  grep -qF "$SRC/$h" <<< "$deps" || { echo "FAIL: editing $h does not re-run CMake"; fail=1; }
done
[ $fail = 0 ] && echo "the shared headers are configure dependencies"
exit $fail
