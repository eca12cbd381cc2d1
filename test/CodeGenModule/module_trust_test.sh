#!/usr/bin/env bash
# The code generator module's search never loads what another user could
# have put there: a module planted beside a copy of hsnn-jit (whose
# constructor would leave a marker file) is refused before dlopen, and a
# copy outside the build tree does not look in the build tree.
# usage: module_trust_test.sh HSNN_JIT HOSTILE_MODULE BUILD_DIR
set -u
J=$1 HOSTILE=$2 BUILD=$3
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }
root=$(mktemp -d /tmp/hsnn-module-trust-XXXXXX)
trap 'chmod -R u+w "$root" 2>/dev/null; rm -rf "$root"' EXIT
chmod 755 "$root"
printf '%s' '{"name": "m", "nodes": [{"formula": "gelu"}]}' > "$root/spec.json"

# plant NAME DIR_MODE FILE_MODE [FILE_OWNER [DIR_OWNER]]: hsnn-jit and the hostile module side by side.
plant() {
  local d=$root/$1
  mkdir -p "$d"
  cp "$J" "$d/hsnn-jit"
  cp "$HOSTILE" "$d/libhsnn-codegen.so"
  chmod "$3" "$d/libhsnn-codegen.so"
  [ -n "${4:-}" ] && chown "$4" "$d/libhsnn-codegen.so"
  [ -n "${5:-}" ] && chown "$5" "$d"
  chmod "$2" "$d"
}
# run NAME: compiles with that copy (which loads the module); sets $out.
run() {
  rm -f "$root/marker"
  out=$(env -u HSNN_CODEGEN_MODULE HSNN_TEST_MARKER="$root/marker" HSNN_CACHE_DIR="$root/cache" \
    "$root/$1/hsnn-jit" compile "$root/spec.json" --emit obj -o "$root/x.o" 2>&1)
}
# refused NAME WHY: the module was refused, for WHY, and never ran.
refused() {
  run "$1"
  local file="$root/$1/libhsnn-codegen.so"
  if [ ! -e "$root/marker" ] && [[ "$out" == *"$file: refused, not loaded: $2"* ]]; then ok; else
    bad "$1: marker $([ -e "$root/marker" ] && echo present || echo absent): $out"; fi
}

# A directory anyone can write (as /tmp, with the sticky bit).
plant sticky 1777 644
refused sticky "$root/sticky is writable by group or others (mode 1777)"
# A module anyone can write.
plant writable 755 666
refused writable "it is writable by group or others (mode 666)"
# A group-writable directory.
plant group 775 644
refused group "$root/group is writable by group or others (mode 775)"
if [ "$(id -u)" = 0 ]; then
  # Another user's module, or a directory another user owns.
  plant foreign-file 755 644 65534
  refused foreign-file "it is owned by uid 65534, neither this user (uid 0) nor root"
  plant foreign-dir 755 644 "" 65534
  refused foreign-dir "$root/foreign-dir is owned by uid 65534, neither this user (uid 0) nor root"
else
  echo "skipped: the cases with another user's files need root to chown"
fi
# The control: the same module where only this user can write is opened
# (its constructor runs) and then refused as not hsnn's, so the cases above
# would have left the marker without the check.
plant trusted 755 644
run trusted
if [ -e "$root/marker" ] && [[ "$out" == *"$root/trusted/libhsnn-codegen.so: not an hsnn code generator module"* ]]; then ok; else
  bad "control: the planted module was not loaded where it is trusted: $out"; fi

# A copy outside the build tree looks beside itself and in the install
# prefix, never in the tree it was built in.
mkdir -p "$root/copy" && cp "$J" "$root/copy/hsnn-jit"
run copy
if [[ "$out" == *"was not found (looked for $root/copy/libhsnn-codegen.so"* ]] && [[ "$out" != *"$BUILD/"* ]]; then ok; else
  bad "a copy outside the build tree: $out"; fi
# The build tree's own copy still finds the module it was built with.
out=$(env -u HSNN_CODEGEN_MODULE "$J" info 2>&1)
if [[ "$out" == *"code generator: $BUILD/lib/hsnn/libhsnn-codegen.so"* ]]; then ok; else bad "the build tree's hsnn-jit: $out"; fi

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
