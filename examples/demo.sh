#!/usr/bin/env bash
# A tour of hsnn-jit: parse, differentiate and evaluate a few formulas.
set -euo pipefail
J="$(readlink -f "${1:-build/bin/hsnn-jit}")"
run() { echo "\$ hsnn-jit $*"; "$J" "$@"; echo; }
run parse 'sin(num)*alpha'
run parse 'log(1 + exp(x))'
run diff 'Piecewise((num, num > 0), (beta*num, True))'
run diff gelu
run eval gelu --at 1
run eval softplus --at 100
run eval relu --at 0 --derivative
run eval 'sin(x)*alpha' --at 0.5 --const alpha=2 --dtype f32
run parse huber
run eval huber --at 3 --y-true 1 --const delta=0.5 --derivative
echo "\$ hsnn-jit parse 'tanhh(x)'   # errors point at the cause"
"$J" parse 'tanhh(x)' || echo "(exit code $?)"
echo
run info
# A layer compiled and run from C++ (examples/embed).
embed="$(dirname "$J")/../examples/embed/embed"
if [ -x "$embed" ]; then echo "\$ examples/embed"; "$embed"; echo; fi
# Ahead of time: a JSON spec to an object and a header, linked into a C program without LLVM or hsnn.
work=$(mktemp -d)
cat > "$work/demo.json" <<'JSON'
{"name": "demo", "dtype": "f32", "nodes": [{"formula": "sin(num)*alpha", "constants": {"alpha": 2.0}}, {"formula": "gelu"}]}
JSON
cat > "$work/app.c" <<'C'
#include "demo.h"
#include <stdio.h>
int main(void) {
  float z[2 * 3] = {-1, 0, 1, -1, 0, 1}, a[6], d[6];
  demo_fused(z, a, d, 3, demo_default_params);
  for (int i = 0; i < 6; ++i) printf("node %d  z = %4.1f  f = %9.6f  f' = %9.6f\n", i / 3, z[i], a[i], d[i]);
  return 0;
}
C
echo "\$ hsnn-jit compile demo.json --emit obj && hsnn-jit compile demo.json --emit header && cc app.c demo.o -lmvec -lm"
(cd "$work" && "$J" compile demo.json --emit obj && "$J" compile demo.json --emit header && cc -O2 app.c demo.o -lmvec -lm -o app && ./app) \
  || echo "(ahead-of-time compile needs the LLVM build)"
rm -rf "$work"
