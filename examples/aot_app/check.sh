#!/usr/bin/env bash
# Runs an AOT-built app and checks every value against `hsnn-jit eval`.
set -euo pipefail
app="$1" jit="$2" dtype="$3"
formulas=("sin(num)*alpha" "relu" "gelu" "gelu" "Piecewise((num, num > 0), (beta*num, True))" "softplus" "tanh" "elu")
consts=("alpha=2.0" "" "" "" "beta=0.1" "" "" "alpha=0.5")
tol=$([ "$dtype" = f32 ] && echo 2e-6 || echo 1e-13)
fail=0 count=0
while read -r n x a d; do
  c=(); [ -n "${consts[$n]}" ] && c=(--const "${consts[$n]}")
  want_a=$("$jit" eval "${formulas[$n]}" --at "$x" --dtype "$dtype" "${c[@]}")
  want_d=$("$jit" eval "${formulas[$n]}" --at "$x" --dtype "$dtype" --derivative "${c[@]}")
  for pair in "$a $want_a" "$d $want_d"; do
    count=$((count + 1))
    if ! awk -v g="${pair% *}" -v w="${pair#* }" -v t="$tol" 'BEGIN { e = g - w; if (e < 0) e = -e; m = w < 0 ? -w : w; exit !(e <= t * (m > 1 ? m : 1)) }'; then
      echo "node $n at $x: aot gives ${pair% *}, hsnn-jit eval gives ${pair#* }"; fail=$((fail + 1))
    fi
  done
done < <("$app")
echo "aot_app ($dtype): $((count - fail)) passed, $fail failed"
[ "$fail" = 0 ]
