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

expect parse 0 $'alpha*sin(num)\nmode: activation\nconstants: alpha' -- parse 'sin(num)*alpha'
expect parse-default 0 $'Piecewise(((y_pred - y_true)**2/2, Abs(y_pred - y_true) <= delta), (delta*(Abs(y_pred - y_true) - delta/2), True))\nmode: loss\nconstants: delta (default 1)' -- parse huber
expect parse-stable 0 $'softplus(x)\nmode: activation\nconstants: none' -- parse 'log(1 + exp(x))'
expect parse-neg 0 $'-x**2\nmode: activation\nconstants: none' -- parse '-x**2'
expect diff 0 'alpha*cos(num)' -- diff 'sin(num)*alpha'
expect diff-gelu 0 'num*exp(-num**2/2)/sqrt(2*pi) + erfc(-num/sqrt(2))/2' -- diff gelu
expect diff-gelu-guards 0 'Piecewise((0, num <= -40), (1, num >= 40), (num*exp(-num**2/2)/sqrt(2*pi) + erfc(-num/sqrt(2))/2, True))' -- diff gelu --guards
expect diff-factored 0 'x**2*(3*sin(x) + x*cos(x))' -- diff 'x**3*sin(x)'
expect diff-gauss 0 '-x*exp(-x**2/2)' -- diff 'exp(-x**2/2)'
expect diff-trig 0 '0' -- diff 'sin(x)**2 + cos(x)**2'
expect diff-relu 0 'Piecewise((0, 0 >= num), (1, True))' -- diff relu
expect diff-loss 0 '2*(y_pred - y_true)' -- diff mse
# The interpreter runs the JIT's op kernels (hsnn's math library) where the
# build has the JIT, the op table's libm calls elsewhere: erfc's last bit differs.
GELU1=0.84134474606854304
if "$J" info --json | grep -q '"cpu_jit_enabled": true'; then GELU1=0.84134474606854293; fi
expect eval-gelu 0 "$GELU1" -- eval gelu --at 1
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
expect parse-json 0 '{"canonical": "alpha*sin(x)", "mode": "activation", "constants": [{"name": "alpha"}]}' -- parse 'sin(x)*alpha' --json
expect diff-json 0 '{"formula": "(y_pred - y_true)**2", "variable": "y_pred", "order": 1, "derivative": "2*(y_pred - y_true)"}' -- diff mse --json
expect diff-order3 0 '-alpha*cos(x)' -- diff 'sin(x)*alpha' --order 3
expect diff-order2-relu 0 '0' -- diff relu --order 2
expect diff-order2-json 0 '{"formula": "(y_pred - y_true)**2", "variable": "y_pred", "order": 2, "derivative": "2"}' -- diff mse --order 2 --json
expect diff-order-bad 2 $'hsnn-jit diff: error: --order takes a whole number from 1 to 8\nTry \'hsnn-jit diff --help\'.' -- diff tanh --order 9
expect eval-order2 0 '-0.72686198138358726' -- eval tanh --at 0.5 --order 2
expect eval-order3-json 0 '{"value": -1.0806046117362795, "dtype": "f64", "derivative": true, "order": 3}' -- eval 'sin(x)*a' --const a=2 --at 1 --order 3 --json
expect eval-order2-loss 0 '1' -- eval huber --at 0.3 --y-true 0 --order 2
expect eval-order0 0 '0.46211715726000974' -- eval tanh --at 0.5 --order 0
expect eval-order-clash 2 $'hsnn-jit eval: error: --derivative and --order disagree\nTry \'hsnn-jit eval --help\'.' -- eval tanh --at 1 --derivative --order 2
expect eval-json 0 "{\"value\": $GELU1, \"dtype\": \"f64\", \"derivative\": false, \"order\": 0}" -- eval gelu --at 1 --json
expect cache-bad-action 2 $'hsnn-jit cache: error: unknown action \'frob\'\nTry \'hsnn-jit cache --help\'.' -- cache frob
expect cache-no-action 2 $'hsnn-jit cache: error: expected list, stats or clear\nTry \'hsnn-jit cache --help\'.' -- cache
expect bench-bad-workload 2 $'hsnn-jit bench: error: --workload takes W1, W2, W3, W4, math, compile, population, latency or all\nTry \'hsnn-jit bench --help\'.' -- bench --workload W9
expect bench-bad-device 2 $'hsnn-jit bench: error: --device takes cpu, cuda or cuda:N\nTry \'hsnn-jit bench --help\'.' -- bench --device gpu0
expect bench-latency-cpu 2 $'hsnn-jit bench: error: the latency workload times GPU calls: give --device cuda[:N]\nTry \'hsnn-jit bench --help\'.' -- bench --workload latency
HSNN_CUDA_LIBRARY=/nonexistent expect bench-no-gpu 1 "hsnn-jit bench: error: backend 'cuda:1' is unavailable: no CUDA driver: cannot load /nonexistent (/nonexistent: cannot open shared object file: No such file or directory)" -- bench --device cuda:1 --workload W4
expect bench-reps-huge 2 $'hsnn-jit bench: error: --reps takes a whole number from 1 to 10000, got \'1e12\'\nTry \'hsnn-jit bench --help\'.' -- bench --reps 1e12
expect bench-reps-junk 2 $'hsnn-jit bench: error: --reps takes a whole number from 1 to 10000, got \'5x\'\nTry \'hsnn-jit bench --help\'.' -- bench --reps 5x
expect bench-method 2 $'hsnn-jit bench: error: --method takes auto, cpu_jit, cpu_interp or cuda (or the seed\'s CPU_JIT, CPU_PYTHON, GPU_CUDA)\nTry \'hsnn-jit bench --help\'.' -- bench --method jitt
expect bench-json-usage 2 '{"error": {"command": "bench", "message": "--workload takes W1, W2, W3, W4, math, compile, population, latency or all", "exit_code": 2}}' -- bench --workload W9 --json
HSNN_CUDA_LIBRARY=/nonexistent expect bench-json-error 1 "{\"error\": {\"command\": \"bench\", \"message\": \"backend 'cuda:1' is unavailable: no CUDA driver: cannot load /nonexistent (/nonexistent: cannot open shared object file: No such file or directory)\", \"exit_code\": 1}}" -- bench --device cuda:1 --workload W4 --json
expect cache-json-usage 2 "{\"error\": {\"command\": \"cache\", \"message\": \"unknown action 'frob'\", \"exit_code\": 2}}" -- cache frob --json
long=$(printf "x+%.0s" $(seq 200))tanhh\(x\)$(printf "+x%.0s" $(seq 200))
expect long-formula 1 $'error: unknown function \'tanhh\'; did you mean \'tanh\'?\n  ...x+x+x+x+x+x+x+x+x+x+x+x+x+x+x+x+x+x+x+x+x+x+x+x+x+tanhh(x)+x+x+x+x+x+x+x+x+x+x+x+x+x+x+x+x+x+x+x+x+x...\n                                                       ^~~~~' -- parse "$long"
expect info-bad 2 $'hsnn-jit info: error: unexpected argument \'--frob\'\nTry \'hsnn-jit info --help\'.' -- info --frob

# cache clear / stats round trip in a private directory
export HSNN_CACHE_DIR="$(mktemp -d)/cache"
expect cache-clear 0 "removed 0 cpu entries from $HSNN_CACHE_DIR" -- cache clear cpu
expect cache-clear-again 0 "removed 0 cpu entries from $HSNN_CACHE_DIR" -- cache clear cpu
expect cache-clear-two 2 $'hsnn-jit cache: error: clear takes one category, got \'cpu\' and \'gpu\' (use \'all\' for both)\nTry \'hsnn-jit cache --help\'.' -- cache clear cpu gpu
expect cache-clear-json 0 "{\"removed\": 0, \"category\": \"all\", \"dir\": \"$HSNN_CACHE_DIR\"}" -- cache clear --json
expect cache-stats 0 $"dir: $HSNN_CACHE_DIR"$'\ncpu: 0 entries, 0 bytes\ngpu: 0 entries, 0 bytes' -- cache stats
out=$("$J" info --json 2>&1); code=$?
if [ $code = 0 ] && [[ "$out" == *'"default_method": '* ]] && [[ "$out" == *"\"cache_dir\": \"$HSNN_CACHE_DIR\""* ]]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL info --json: $out"; fi
# A cache directory whose name is not UTF-8: the JSON stays valid (U+FFFD for the byte).
out=$(HSNN_CACHE_DIR="$(dirname "$HSNN_CACHE_DIR")/bad"$'\xff'"name" "$J" info --json 2>/dev/null)
if [[ "$out" == *'bad\ufffdname"'* ]] && ! printf '%s' "$out" | LC_ALL=C grep -q $'\xff'; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL info --json non-UTF-8: $out"; fi

# Ahead-of-time compile (only in builds with the LLVM code generator).
if "$J" compile --help > /dev/null 2>&1 && ! "$J" compile x.json --emit obj 2>&1 | grep -q "no LLVM code generator"; then
  dir=$(mktemp -d)
  printf '%s' '{"name": "l1", "nodes": [{"formula": "sin(num)*alpha", "constants": {"alpha": 2}}, {"formula": "tanhh(x)"}]}' > "$dir/bad.json"
  printf '%s' '{"name": "l1", "nodes": [{"formula": "relu"}, {"formula": "sin", "repeat": 32}]}' > "$dir/shared.json"
  printf '%s' '{"name": "l1", "nodes": [{"formula": "relu", "repeat": 0}]}' > "$dir/repeat.json"
  printf '%s' '{"name": "l1", "nodes": [' > "$dir/broken.json"
  printf '%s' '{"name": "9lives", "nodes": [{"formula": "relu"}]}' > "$dir/name.json"
  printf '%s' '{"name": "good", "dtype": "f64", "layout": "batch_major", "nodes": [{"formula": "gelu", "repeat": 4}]}' > "$dir/good.json"
  printf '%s' '{"name": "hub", "mode": "loss", "formula": "huber", "constants": {"delta": 0.5}}' > "$dir/loss.json"
  expect compile-bad-formula 1 $'node 1: error: unknown function \'tanhh\'; did you mean \'tanh\'?\n  tanhh(x)\n  ^~~~~' -- compile "$dir/bad.json" --emit obj -o "$dir/x.o"
  expect compile-shared-bad-formula 1 $'nodes 1, 2, 3, ... (32 nodes): error: \'sin\' is a function; call it, e.g. sin(num)\n  sin\n  ^~~' -- compile "$dir/shared.json" --emit obj -o "$dir/x.o"
  expect compile-bad-repeat 1 "hsnn-jit compile: error: $dir/repeat.json: nodes[0]: \"repeat\" must be an integer from 1 to 1048576" -- compile "$dir/repeat.json" --emit obj
  expect compile-bad-name 1 "hsnn-jit compile: error: layer name '9lives' is not a C identifier" -- compile "$dir/name.json" --emit obj
  printf '%s' '{"name": "l1", "dtyp": "f64", "nodes": [{"formula": "relu"}]}' > "$dir/key.json"
  printf '%s' '{"name": "l1", "nodes": [{"formula": "relu", "constant": {"a": 1}}]}' > "$dir/nodekey.json"
  expect compile-unknown-key 1 "hsnn-jit compile: error: $dir/key.json: unknown key \"dtyp\" (known: name, mode, dtype, layout, nodes, order)" -- compile "$dir/key.json" --emit obj
  expect compile-unknown-node-key 1 "hsnn-jit compile: error: $dir/nodekey.json: nodes[0]: unknown key \"constant\" (known: formula, constants, repeat)" -- compile "$dir/nodekey.json" --emit obj
  echo '{"name": "second", "order": 2, "nodes": [{"formula": "sin(num)*a", "constants": {"a": 2}}]}' > "$dir/order.json"
  echo '{"name": "second", "order": 9, "nodes": [{"formula": "tanh"}]}' > "$dir/order9.json"
  expect compile-order-bad 1 "hsnn-jit compile: error: $dir/order9.json: \"order\" must be an integer from 0 to 8" -- compile "$dir/order9.json" --emit header
  "$J" compile "$dir/order.json" --emit header -o - | grep -q 'differentiated 2 times in num' &&
    "$J" compile "$dir/order.json" --emit header -o - | grep -q 'node 0: -a\*sin(num) = a' && pass=$((pass + 1)) ||
    { fail=$((fail + 1)); echo "FAIL compile with \"order\": 2 names the second derivative"; }
  expect compile-dev-zero 1 "hsnn-jit compile: error: /dev/zero is not a regular file" -- compile /dev/zero --emit obj
  printf '%0.s[' $(seq 100000) > "$dir/deep.json"
  expect compile-deep 1 "hsnn-jit compile: error: $dir/deep.json: JSON nested 100000 levels deep; a spec nests at most 32" -- compile "$dir/deep.json" --emit obj
  printf '{"name": "l1", "nodes": [{"formula": "relu", "constants": %s1%s}]}' "$(printf '%0.s{"a": ' $(seq 50000))" "$(printf '%0.s}' $(seq 50000))" > "$dir/deepconst.json"
  expect compile-deep-constants 1 "hsnn-jit compile: error: $dir/deepconst.json: JSON nested 50003 levels deep; a spec nests at most 32" -- compile "$dir/deepconst.json" --emit obj
  for t in bpf amdgcn; do
    expect compile-target-$t 1 "hsnn-jit compile: error: target '$t' is not supported for CPU kernels: use an x86_64 or aarch64 triple (GPU kernels: --emit ptx)" -- compile "$dir/good.json" --emit obj --target $t -o "$dir/x.o"
  done
  expect compile-cpu-i386 1 "hsnn-jit compile: error: CPU 'i386' has no 64-bit mode, which x86_64 code needs (try x86-64 or x86-64-v3)" -- compile "$dir/good.json" --emit obj --cpu i386 -o "$dir/x.o"
  for a in sm_999 sm_100 sm_120; do
    expect compile-arch-$a 1 "hsnn-jit compile: error: GPU architecture '$a' is not one LLVM 19.1.7 generates code for (the newest is sm_90a); devices newer than sm_90, such as sm_100 and sm_120, run sm_90 PTX, which their driver assembles" -- compile "$dir/good.json" --emit ptx --gpu-arch $a -o "$dir/x.ptx"
  done
  [ ! -e "$dir/x.o" ] && [ ! -e "$dir/x.ptx" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL a failed compile left a file"; }
  # --progress reports code generation on a pipe, a line per tenth; without it a pipe stays quiet.
  last=$("$J" compile "$dir/good.json" --emit obj -o "$dir/p.o" --progress 2>&1 | tail -1)
  [[ "$last" =~ ^generating\ code:\ 100%\ \(([0-9]+)/([0-9]+)\ functions\)$ ]] && [ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[2]}" ] &&
    [ -z "$("$J" compile "$dir/good.json" --emit obj -o "$dir/p.o" 2>&1)" ] && pass=$((pass + 1)) ||
    { fail=$((fail + 1)); echo "FAIL compile --progress: '$last'"; }
  rm -f "$dir/p.o"
  "$J" compile "$dir/good.json" --emit header -o - > "$dir/stdout.h" && grep -q 'good_forward' "$dir/stdout.h" && [ ! -e ./- ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL -o - writes to stdout"; }
  printf '%s' '{"name": "hs", "mode": "loss", "formula": "huber", "reduction": "sum"}' > "$dir/sum.json"
  "$J" compile "$dir/sum.json" --emit header -o "$dir/sum.h" && "$J" compile "$dir/loss.json" --emit header -o "$dir/mean.h"
  grep -q 'define HS_REDUCTION_SUM 1' "$dir/sum.h" && grep -q 'define HUB_REDUCTION_MEAN 1' "$dir/mean.h" && grep -q '/ (double)n' "$dir/mean.h" && ! grep -q '/ (double)n' "$dir/sum.h" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL loss reduction in the header"; }
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
  # Without FMA the kernels call libmvec: its variants take one register, so
  # a kernel's two-register vectors go through two vector calls, never
  # through the scalar function lane by lane (which took 6-30x as long).
  if [ -e /lib/x86_64-linux-gnu/libmvec.so.1 ]; then
    printf '%s' '{"name": "m", "nodes": [{"formula": "exp(num)"}]}' > "$dir/mvec.json"
    "$J" compile "$dir/mvec.json" --emit llvm-ir --cpu nehalem -o "$dir/mvec.ll"
    [ "$(grep -c 'call <4 x float> @_ZGVbN4v_expf' "$dir/mvec.ll")" -ge 2 ] && ! grep -q '@expf(' "$dir/mvec.ll" &&
      pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL libmvec calls per register: $(grep -o '@[_A-Za-z0-9]*expf' "$dir/mvec.ll" | sort | uniq -c)"; }
  fi
  # With FMA the math is inline: the object needs no library at all (the
  # header says so); without FMA it names libmvec's vector functions.
  printf '%s' '{"name": "lib", "nodes": [{"formula": "gelu"}, {"formula": "sin(num)*tanh(num)"}, {"formula": "atan(num)**2.5 + log1p(num**2)"}]}' > "$dir/lib.json"
  "$J" compile "$dir/lib.json" --emit obj --cpu haswell -o "$dir/lib-fma.o" && "$J" compile "$dir/lib.json" --emit obj --cpu x86-64 -o "$dir/lib-sse.o" &&
    "$J" compile "$dir/lib.json" --emit header -o "$dir/lib.h"
  undefinedFma=$(nm -u "$dir/lib-fma.o" 2> /dev/null | awk '{print $2}' | tr '\n' ' ')
  if [ -s "$dir/lib-fma.o" ] && [ -z "$undefinedFma" ] && nm -u "$dir/lib-sse.o" | grep -q '_ZGVbN4v_erfcf' &&
     grep -q 'Objects for a CPU with FMA (x86-64-v3 or newer, aarch64) call no library' "$dir/lib.h"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1)); echo "FAIL link needs: FMA object needs '$undefinedFma'; without FMA: $(nm -u "$dir/lib-sse.o" | wc -l) symbols"
  fi
  # A number no double holds: a clear error, not an uncaught exception (exit 134).
  printf '%s' '{"name": "m", "nodes": [{"formula": "num*c", "constants": {"c": 1e999}}]}' > "$dir/huge.json"
  expect compile-huge-number 1 "hsnn-jit compile: error: $dir/huge.json: invalid JSON: number overflow parsing '1e999'" -- compile "$dir/huge.json" --emit obj -o "$dir/x.o"
  # A failed write never removes what -o names: a file keeps its old bytes
  # (written to a temporary and renamed only when whole; the file size
  # limit makes the write fail), and a device is written in place.
  printf 'precious' > "$dir/keep.o"
  out=$( (trap '' XFSZ; ulimit -f 1; "$J" compile "$dir/good.json" --emit obj -o "$dir/keep.o") 2>&1); code=$?
  if [ $code = 1 ] && [[ "$out" == "hsnn-jit compile: error: cannot write $dir/keep.o: File too large" ]] && [ "$(cat "$dir/keep.o")" = precious ] &&
     [ -z "$(find "$dir" -name '.keep.o.tmp-*')" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL -o kept on a failed write: exit $code: $out: $(cat "$dir/keep.o" | head -c 20)"; fi
  if [ "$(id -u)" = 0 ] && mknod "$dir/full" c 1 7 2> /dev/null; then # a /dev/full of our own
    expect compile-o-device 1 "hsnn-jit compile: error: cannot write $dir/full: No space left on device" -- compile "$dir/good.json" --emit obj -o "$dir/full"
    [ -c "$dir/full" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL -o device: the device node was removed"; }
  else
    echo "skipped: -o to a device node (mknod needs root)"
  fi
  "$J" compile "$dir/good.json" --emit obj -o "$dir/keep.o" && [ "$(head -c 4 "$dir/keep.o")" = $'\x7fELF' ] &&
    [ "$(stat -c %a "$dir/keep.o")" = 644 ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL -o replaces a file, keeping its mode"; }
  expect compile-o-dir 1 "hsnn-jit compile: error: cannot write $dir: Is a directory" -- compile "$dir/good.json" --emit obj -o "$dir"
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

# The GPU latency workload against the stand-in driver (it runs no kernel: the rows, not the times, are checked):
# three sizes x two layouts, each beside a copy of the same bytes. Builds with the code generators only.
if [ -n "${2:-}" ] && "$J" info --json | grep -q '"cpu_jit_enabled": true'; then
  got=$(HSNN_CUDA_LIBRARY="$2" HSNN_FAKE_CUDA_DEVICES=9.0 "$J" bench --device cuda --workload latency --dtype f32 --reps 1 --json |
        grep -o '"variant": "forward [a-z_]* [0-9x]*"' | tr '\n' ';')
  want='"variant": "forward nodes_major 64x32";"variant": "forward batch_major 64x32";"variant": "forward nodes_major 256x1024";"variant": "forward batch_major 256x1024";"variant": "forward nodes_major 256x65536";"variant": "forward batch_major 256x65536";'
  if [ "$got" = "$want" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); printf 'FAIL bench latency\n--- got\n%s\n--- want\n%s\n' "$got" "$want"; fi
fi

# The bench's same-run layout ratio: W1's two layers timed alternately (2 x --reps pairs), in the JSON beside
# the per-variant rows. Builds with the JIT only (the interpreter would take minutes).
if "$J" info --json | grep -q '"cpu_jit_enabled": true'; then
  got=$("$J" bench --workload W1 --dtype f32 --reps 1 --json | tr -d '\n' | grep -o '"layout_ratios": \[ *{"workload": "W1", "kind": "forward", "dtype": "f32", "batch_over_nodes": [0-9.]*, "pairs": 2}\]')
  if [ -n "$got" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL bench layout_ratios"; fi
fi

# A process that compiles once and exits leaves its layer linked into one shared object (exit lets the
# background link finish), and leaves no link files behind; the next process loads it. Builds with the JIT only.
if "$J" info --json | grep -q '"cpu_jit_enabled": true' && "$J" info | grep -q '^cache linker:   /'; then
  dir=$(mktemp -d)
  HSNN_USE_KERNEL_CACHE=1 HSNN_CACHE_DIR="$dir/cache" TMPDIR="$dir" "$J" bench --cache-hit-probe > /dev/null 2>&1
  got=$(HSNN_USE_KERNEL_CACHE=1 HSNN_CACHE_DIR="$dir/cache" TMPDIR="$dir" "$J" bench --cache-hit-probe | cut -d' ' -f2)
  left=$(find "$dir" -name 'hsnn-link-*' | wc -l)
  if [ "$got" = 1 ] && [ "$left" = 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL linked at exit: linked '$got', $left link directories left"; fi
  rm -rf "$dir"
fi

# A linker that hangs: exit waits its grace (1 s), kills it and removes its files; nothing is left running.
if "$J" info --json | grep -q '"cpu_jit_enabled": true'; then
  dir=$(mktemp -d)
  # The code generator module (LLVM) missing or not one: compiling says so,
  # info reports cpu_jit unavailable, the interpreter still evaluates.
  printf '%s' '{"name": "m", "nodes": [{"formula": "gelu"}]}' > "$dir/good.json"
  printf '%s' '{"name": "hub", "mode": "loss", "formula": "huber"}' > "$dir/loss.json"
  HSNN_CODEGEN_MODULE=/nonexistent/libhsnn-codegen.so expect codegen-missing 1 "hsnn-jit compile: error: the code generator module libhsnn-codegen.so was not found (looked for /nonexistent/libhsnn-codegen.so); set HSNN_CODEGEN_MODULE to its path" -- compile "$dir/good.json" --emit obj -o "$dir/x.o"
  HSNN_CODEGEN_MODULE="$2" expect codegen-foreign 1 "hsnn-jit compile: error: the code generator module cannot be used: $2: not an hsnn code generator module" -- compile "$dir/loss.json" --emit obj -o "$dir/x.o"
  out=$(HSNN_CODEGEN_MODULE="$3" "$J" compile "$dir/loss.json" --emit obj -o "$dir/x.o" 2>&1)
  if [[ "$out" == "hsnn-jit compile: error: the code generator module cannot be used: $3: built from another hsnn build (token another-build, this library's "*")" ]]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL module of another build: $out"; fi
  out=$(HSNN_CODEGEN_MODULE=/nonexistent/libhsnn-codegen.so "$J" info 2>&1)
  if [[ "$out" == *$'cpu_jit:        unavailable: the code generator module libhsnn-codegen.so was not found'* ]] && [[ "$out" == *'default method: cpu_interp'* ]] && [[ "$out" != *'code generator:'* ]]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL info without the module: $out"; fi
  HSNN_CODEGEN_MODULE=/nonexistent/libhsnn-codegen.so expect codegen-missing-eval 0 '0.84134474606854304' -- eval gelu --at 1
  out=$("$J" info 2>&1)
  if [[ "$out" == *$'\ncode generator: /'*'/libhsnn-codegen.so'* ]]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL info names the module: $out"; fi
  # HSNN_TARGET_CPU names the CPU the JIT compiles for; a name LLVM does not know, or a value of
  # HSNN_CPU_MATH other than hsnn or libmvec, leaves cpu_jit unavailable with the reason.
  if [ "$(uname -m)" = x86_64 ]; then
    out=$(HSNN_TARGET_CPU=x86-64-v2 "$J" info 2>&1)
    if [[ "$out" == *$'cpu:            x86-64-v2 (DEFAULT)\n'*$'cpu_jit:        available'* ]]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL HSNN_TARGET_CPU: $out"; fi
    out=$(HSNN_TARGET_CPU=pentium9 "$J" info 2>&1)
    if [[ "$out" == *"cpu_jit:        unavailable: HSNN_TARGET_CPU='pentium9': LLVM knows no x86-64 CPU of that name (haswell, skylake-avx512, znver3, ...)"* ]]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL HSNN_TARGET_CPU unknown: $out"; fi
  fi
  out=$(HSNN_CPU_MATH=fast "$J" info 2>&1)
  if [[ "$out" == *"cpu_jit:        unavailable: HSNN_CPU_MATH='fast' is not hsnn or libmvec"* ]]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL HSNN_CPU_MATH: $out"; fi
  printf '#!/bin/sh\nexec sleep 37.25\n' > "$dir/stuck-ld"; chmod +x "$dir/stuck-ld"
  start=$(date +%s%N)
  HSNN_LINKER="$dir/stuck-ld" HSNN_USE_KERNEL_CACHE=1 HSNN_CACHE_DIR="$dir/cache" TMPDIR="$dir" timeout 20 "$J" bench --cache-hit-probe > /dev/null 2>&1
  took=$(( ($(date +%s%N) - start) / 1000000 ))
  left=$(find "$dir" -name 'hsnn-link-*' | wc -l)
  running=$(pgrep -f 'sleep 37.25' | wc -l)
  if [ "$took" -lt 5000 ] && [ "$left" = 0 ] && [ "$running" = 0 ]; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAIL stuck linker at exit: ${took} ms, $left link directories left, $running linkers running"; pkill -f 'sleep 37.25'; fi
  rm -rf "$dir"
fi

for sub in parse diff eval bench cache info compile; do
  out=$("$J" $sub --help 2>&1); code=$?
  if [ $code = 0 ] && [[ "$out" == usage:\ hsnn-jit\ $sub* ]]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $sub --help"; fi
done
out=$("$J" --help 2>&1); code=$?
if [ $code = 0 ] && [[ "$out" == usage:* ]]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL --help"; fi

echo "cli: $pass passed, $fail failed"
[ "$fail" = 0 ]
