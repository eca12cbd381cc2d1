#!/usr/bin/env bash
# Exit while a tiered compile runs, in a fresh process each time (the first
# compile of a process is the one that loads and initialises LLVM): every
# exit is prompt (well under the compile's own time), clean (status 0,
# nothing on stderr: no "double free", no abort) and never hangs.
# usage: tiered_exit.sh PROBE
set -u
P=$1
pass=0 fail=0
# Under load, as the exits that hung were found: a busy loop on one core.
bash -c 'while :; do :; done' &
hog=$!
trap 'kill "$hog" 2> /dev/null' EXIT
ms() { date +%s%N | cut -c1-13; }
t0=$(ms); "$P" 1500 wait; full=$(( $(ms) - t0 ))
echo "a whole compile of 1500 formulas, waited for: $full ms"
worst=0
for i in $(seq 1 12); do
  t0=$(ms)
  err=$(timeout 60 "$P" 1500 2>&1); code=$?
  took=$(( $(ms) - t0 ))
  [ $took -gt $worst ] && worst=$took
  if [ $code = 0 ] && [ -z "$err" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL run $i: exit $code after $took ms: $err"; fi
done
echo "slowest exit while compiling: $worst ms"
# Prompt: the compile is not waited for (a checkpoint after each kernel).
if [ $worst -lt $(( full / 2 )) ] || [ $worst -lt 1000 ]; then pass=$((pass + 1)); else
  fail=$((fail + 1)); echo "FAIL exits waited for the compile: $worst ms against $full ms"; fi
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
