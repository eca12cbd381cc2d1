#!/usr/bin/env bash
# Golden tests of hsnn-jit: output and exit code for good and bad input.
set -u
J="$1"
pass=0 fail=0
# expect NAME EXPECTED_RC EXPECTED_OUTPUT(stdout+stderr) -- ARGS...
expect() {
  local name="$1" rc="$2" want="$3"
  shift 4
  local got code
  got=$("$J" "$@" 2>&1)
  code=$?
  if [ "$code" = "$rc" ] && [ "$got" = "$want" ]; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    printf 'FAIL %s: exit %s (want %s)\n--- got\n%s\n--- want\n%s\n' "$name" "$code" "$rc" "$got" "$want"
  fi
}

expect parse 0 $'sin(num)*alpha\nmode: activation\nconstants: alpha' -- parse 'sin(num)*alpha'
expect parse-default 0 $'Piecewise((0.5*((y_pred - y_true)*(y_pred - y_true)), Abs(y_pred - y_true) <= delta), (delta*(Abs(y_pred - y_true) - 0.5*delta), True))\nmode: loss\nconstants: delta (default 1)' -- parse huber
expect parse-stable 0 $'softplus(num)\nmode: activation\nconstants: none' -- parse 'log(1 + exp(x))'
expect parse-neg 0 $'-(num*num)\nmode: activation\nconstants: none' -- parse '-x**2'
expect diff 0 'cos(num)*alpha' -- diff 'sin(num)*alpha'
expect diff-relu 0 'Piecewise((0, 0 >= num), (1, True))' -- diff relu
expect diff-loss 0 'y_pred - y_true + (y_pred - y_true)' -- diff mse
expect eval-gelu 0 '0.84134474606854293' -- eval gelu --at 1
expect eval-softplus 0 '100' -- eval softplus --at 100
expect eval-sigmoid 0 '0' -- eval sigmoid --at -1000
expect eval-const 0 '1.682941969615793' -- eval 'sin(x)*alpha' --at 1 --const alpha=2
expect eval-deriv 0 '0' -- eval relu --at 0 --derivative
expect eval-f32 0 '0.84134471416473389' -- eval gelu --at 1 --dtype f32
expect eval-loss 0 '1.5' -- eval huber --at 3 --y-true 1
expect eval-loss-grad 0 '0.5' -- eval huber --at 3 --y-true 1 --const delta=0.5 --derivative
expect bad-function 1 $'error: unknown function \'tanhh\'; did you mean \'tanh\'?\n  tanhh(x)\n  ^~~~~' -- parse 'tanhh(x)'
expect bad-paren 1 $'error: expected \')\' to close the \'(\' at column 1, found the end of the formula\n  (x+1\n      ^' -- diff '(x+1'
expect missing-const 1 $'node 0: error: missing constant \'alpha\': give it a value\n  sin(x)*alpha\n         ^~~~~' -- eval 'sin(x)*alpha' --at 1
expect bad-number 1 "hsnn-jit eval: error: --at 'abc' is not a number" -- eval relu --at abc
expect no-at 2 $'hsnn-jit eval: error: --at X is required\nTry \'hsnn-jit eval --help\'.' -- eval relu
expect no-formula 2 $'hsnn-jit parse: error: no formula given\nTry \'hsnn-jit parse --help\'.' -- parse
expect bad-option 2 $'hsnn-jit diff: error: unknown option \'--frobnicate\'\nTry \'hsnn-jit diff --help\'.' -- diff x --frobnicate
expect bad-command 2 $'hsnn-jit: error: unknown command \'frobnicate\'\nTry \'hsnn-jit --help\'.' -- frobnicate
expect no-command 2 $'hsnn-jit: error: no command given\nTry \'hsnn-jit --help\'.' --
expect bad-mode 2 $'hsnn-jit parse: error: --mode takes \'activation\' or \'loss\'\nTry \'hsnn-jit parse --help\'.' -- parse x --mode foo
expect version 0 'hsnn-jit 0.1.0' -- --version
expect parse-json 0 '{"canonical": "sin(num)*alpha", "mode": "activation", "constants": [{"name": "alpha"}]}' -- parse 'sin(x)*alpha' --json
expect diff-json 0 '{"formula": "(y_pred - y_true)*(y_pred - y_true)", "variable": "y_pred", "derivative": "y_pred - y_true + (y_pred - y_true)"}' -- diff mse --json
expect eval-json 0 '{"value": 0.84134474606854293, "dtype": "f64", "derivative": false}' -- eval gelu --at 1 --json
expect cache-bad-action 2 $'hsnn-jit cache: error: unknown action \'frob\'\nTry \'hsnn-jit cache --help\'.' -- cache frob
expect cache-no-action 2 $'hsnn-jit cache: error: expected list, stats or clear\nTry \'hsnn-jit cache --help\'.' -- cache
expect bench-bad-workload 2 $'hsnn-jit bench: error: --workload takes W1, W2, W3, W4, compile or all\nTry \'hsnn-jit bench --help\'.' -- bench --workload W9
expect bench-bad-device 2 $'hsnn-jit bench: error: --device takes cpu, cuda or cuda:N\nTry \'hsnn-jit bench --help\'.' -- bench --device gpu0
HSNN_CUDA_LIBRARY=/nonexistent expect bench-no-gpu 1 "hsnn-jit bench: error: backend 'cuda:1' is unavailable: no CUDA driver: cannot load /nonexistent (/nonexistent: cannot open shared object file: No such file or directory)" -- bench --device cuda:1 --workload W4
expect info-bad 2 $'hsnn-jit info: error: unexpected argument \'--frob\'\nTry \'hsnn-jit info --help\'.' -- info --frob

# cache clear / stats round trip in a private directory
export HSNN_CACHE_DIR="$(mktemp -d)/cache"
expect cache-clear 0 "cleared cpu entries in $HSNN_CACHE_DIR" -- cache clear cpu
expect cache-stats 0 $"dir: $HSNN_CACHE_DIR"$'\ncpu: 0 entries, 0 bytes\ngpu: 0 entries, 0 bytes' -- cache stats
out=$("$J" info --json 2>&1); code=$?
if [ $code = 0 ] && [[ "$out" == *'"default_method": '* ]] && [[ "$out" == *"\"cache_dir\": \"$HSNN_CACHE_DIR\""* ]]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL info --json: $out"; fi

# Ahead-of-time compile (only in builds with the LLVM code generator).
if "$J" compile --help > /dev/null 2>&1 && ! "$J" compile x.json --emit obj 2>&1 | grep -q "no LLVM code generator"; then
  dir=$(mktemp -d)
  printf '%s' '{"name": "l1", "nodes": [{"formula": "sin(num)*alpha", "constants": {"alpha": 2}}, {"formula": "tanhh(x)"}]}' > "$dir/bad.json"
  printf '%s' '{"name": "l1", "nodes": [{"formula": "relu", "repeat": 0}]}' > "$dir/repeat.json"
  printf '%s' '{"name": "l1", "nodes": [' > "$dir/broken.json"
  printf '%s' '{"name": "9lives", "nodes": [{"formula": "relu"}]}' > "$dir/name.json"
  printf '%s' '{"name": "good", "dtype": "f64", "layout": "batch_major", "nodes": [{"formula": "gelu", "repeat": 4}]}' > "$dir/good.json"
  printf '%s' '{"name": "hub", "mode": "loss", "formula": "huber", "constants": {"delta": 0.5}}' > "$dir/loss.json"
  expect compile-bad-formula 1 $'node 1: error: unknown function \'tanhh\'; did you mean \'tanh\'?\n  tanhh(x)\n  ^~~~~' -- compile "$dir/bad.json" --emit obj -o "$dir/x.o"
  expect compile-bad-repeat 1 "hsnn-jit compile: error: $dir/repeat.json: nodes[0]: \"repeat\" must be an integer from 1 to 1048576" -- compile "$dir/repeat.json" --emit obj
  expect compile-bad-name 1 "layer name '9lives' is not a C identifier" -- compile "$dir/name.json" --emit obj
  expect compile-no-emit 2 $'hsnn-jit compile: error: --emit is required (obj, asm, llvm-ir or header)\nTry \'hsnn-jit compile --help\'.' -- compile "$dir/good.json"
  HSNN_PTXAS=/nonexistent/ptxas expect compile-cubin-no-ptxas 1 'hsnn-jit compile: error: /nonexistent/ptxas failed (exit status 127)' -- compile "$dir/good.json" --emit cubin -o "$dir/x.cubin"
  if [ -x /usr/local/cuda/bin/ptxas ]; then
    expect compile-cubin 0 '' -- compile "$dir/good.json" --emit cubin --gpu-arch sm_90 -o "$dir/good.cubin"
    [ -s "$dir/good.cubin" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL cubin written"; }
  fi
  expect compile-obj 0 '' -- compile "$dir/good.json" --emit obj -o "$dir/good.o"
  expect compile-header 0 '' -- compile "$dir/good.json" --emit header -o "$dir/good.h"
  expect compile-ir 0 '' -- compile "$dir/loss.json" --emit llvm-ir -o "$dir/hub.ll"
  expect compile-ptx 0 '' -- compile "$dir/loss.json" --emit ptx --gpu-arch sm_90 -o "$dir/hub.ptx"
  grep -q 'void good_fused(const double \*z, double \*a, double \*dfdz, int64_t batch, const double \*params);' "$dir/good.h" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL header declares good_fused"; }
  grep -q 'define.*@hub_fused' "$dir/hub.ll" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL IR defines hub_fused"; }
  grep -q '.entry hub_fused' "$dir/hub.ptx" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL PTX has hub_fused"; }
  if "$J" compile "$dir/broken.json" --emit obj 2> "$dir/err"; then fail=$((fail + 1)); echo "FAIL broken json accepted"; else
    grep -q "invalid JSON" "$dir/err" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL broken json message: $(cat "$dir/err")"; }
  fi
  rm -rf "$dir"
fi

# GPUs as info reports them, from the stand-in driver (test/CUDA/FakeDriver.cpp).
if [ -n "${2:-}" ]; then
  got=$(HSNN_CUDA_LIBRARY="$2" HSNN_FAKE_CUDA_DEVICES=9.0,10.0 "$J" info | grep -E '^(gpus|cuda driver|  cuda:)')
  if "$J" info --json | grep -q '"cpu_jit_enabled": true'; then  # builds with the code generators
    want=$'gpus:           2\ncuda driver:    12.4\n  cuda:0 hsnn fake GPU (sm_90) (sm_90, 1024 MiB), code for sm_90\n  cuda:1 hsnn fake GPU (sm_100) (sm_100, 1024 MiB), code for sm_90'
  else
    want=$'gpus:           2\ncuda driver:    12.4\n  cuda:0 hsnn fake GPU (sm_90) (sm_90, 1024 MiB)\n  cuda:1 hsnn fake GPU (sm_100) (sm_100, 1024 MiB)'
  fi
  if [ "$got" = "$want" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); printf 'FAIL info gpus\n--- got\n%s\n--- want\n%s\n' "$got" "$want"; fi
fi

for sub in parse diff eval bench cache info compile; do
  out=$("$J" $sub --help 2>&1); code=$?
  if [ $code = 0 ] && [[ "$out" == usage:\ hsnn-jit\ $sub* ]]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $sub --help"; fi
done
out=$("$J" --help 2>&1); code=$?
if [ $code = 0 ] && [[ "$out" == usage:* ]]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL --help"; fi

echo "cli: $pass passed, $fail failed"
[ "$fail" = 0 ]
