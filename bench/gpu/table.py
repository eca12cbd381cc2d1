"""The device script's last lines: hsnn's GPU rows (hsnn-jit bench --device cuda --json) beside PyTorch's
(torch_peers.py), each as its time over a device-to-device copy of the same bytes measured in the same run, with
the targets of the GPU-kernel work (W1-W4 <= 1.25x copy, batch-major <= 1.15x nodes-major, gelu <= 1.10x).

    python3 table.py bench-gpu.json [torch.json]
"""
import json
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print(f"({path}: {e})")
        return None


def main(argv):
    hsnn = load(argv[1]) if len(argv) > 1 else None
    torch = load(argv[2]) if len(argv) > 2 else None
    if not hsnn or "error" in hsnn:
        print("no hsnn-jit bench results" + (f": {hsnn['error']['message']}" if hsnn else ""))
        return 1
    print(f"\n{hsnn['machine']['device']}; x = time / a device-to-device copy of the same bytes, same run")
    rows = {(r["workload"], r["variant"], r["dtype"]): r for r in hsnn["results"]}
    misses = []

    def target(label, x, limit):
        if x > limit:
            misses.append(f"{label} {x:.2f}x > {limit}x")
        return "ok" if x <= limit else f"> {limit}"

    print(f"{'workload':<34}{'dtype':<6}{'nodes-major':>12}{'batch-major':>12}{'batch/nodes':>12}  target")
    for (workload, variant, dtype), r in rows.items():
        if workload not in ("W1", "W2") or "nodes_major" not in variant:
            continue
        other = rows.get((workload, variant.replace("nodes_major", "batch_major"), dtype))
        if other is None:
            continue
        kind = variant.replace(" nodes_major", "")
        ratio = other["ms"] / r["ms"]
        verdict = [target(f"{workload} {kind} {dtype} nodes-major", r["x_limit"], 1.25),
                   target(f"{workload} {kind} {dtype} batch-major", other["x_limit"], 1.25),
                   target(f"{workload} {kind} {dtype} batch/nodes", ratio, 1.15)]
        print(f"{workload + ' ' + kind:<34}{dtype:<6}{r['x_limit']:>12.2f}{other['x_limit']:>12.2f}{ratio:>12.2f}  "
              f"{'ok' if all(v == 'ok' for v in verdict) else 'missed'}")
    print(f"\n{'single formulas and losses':<40}{'dtype':<6}{'x copy':>8}  target")
    for (workload, variant, dtype), r in rows.items():
        if workload in ("W3", "W4"):
            limit = 1.10 if workload == "W3" else 1.25
            print(f"{workload + ' ' + variant:<40}{dtype:<6}{r['x_limit']:>8.2f}  "
                  f"{target(f'{workload} {variant} {dtype}', r['x_limit'], limit)}")
    print(f"\n{'per call (synchronized), nodes x batch':<46}{'dtype':<6}{'us':>9}{'copy us':>9}")
    for (workload, variant, dtype), r in rows.items():
        if workload == "latency":
            print(f"{'hsnn ' + variant:<46}{dtype:<6}{r['ms'] * 1e3:>9.1f}{r['stream_ms'] * 1e3:>9.1f}")
    if torch and "results" in torch:
        for r in torch["results"]:
            if r["workload"] == "latency":
                print(f"{r['variant']:<46}{r['dtype']:<6}{r['ms'] * 1e3:>9.1f}{r['copy_ms'] * 1e3:>9.1f}")
        print(f"\nPyTorch {torch['torch']} on {torch['device']}, the same workloads")
        print(f"{'':<46}{'dtype':<6}{'x copy':>8}")
        for r in torch["results"]:
            if r["workload"] != "latency":
                print(f"{r['workload'] + ' ' + r['variant']:<46}{r['dtype']:<6}{r['x_copy']:>8.2f}")
    elif torch:
        print(f"\nPyTorch: {torch.get('skipped', 'no results')}")
    print(f"\ntargets missed: {len(misses)}" + "".join(f"\n  {m}" for m in misses))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
