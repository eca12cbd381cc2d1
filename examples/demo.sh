#!/usr/bin/env bash
# A tour of hsnn-jit: parse, differentiate and evaluate a few formulas.
set -euo pipefail
J="${1:-build/bin/hsnn-jit}"
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
