"""hsnn.torch on CUDA tensors, checked on the GPU machine (no GPU runs it elsewhere): default arguments put the
modules on the input's device; the C++ path (hsnn._torch) takes contiguous tensors; values and gradients are the CPU
JIT's bits (one math library); gradcheck and gradgradcheck in float64 with trainable constants; FormulaLoss's value
stays a CUDA tensor, y_true gets its gradient; a training step makes PyTorch wait for nothing
(torch.cuda.set_sync_debug_mode). Prints one line per check and a JSON summary last; exit 1 if any failed.

    python3 torch_check.py            # on the GPU machine
    python3 torch_check.py --device cpu   # the script itself, checked where there is no GPU (ctest)
"""
import json
import sys
import traceback

import torch

FORMULAS = ["relu", "sigmoid", "tanh", "gelu", "silu", "softplus", "sin(num)", "0.5*num+0.1"]
results = []


def check(name):
    def run(fn):
        try:
            detail = fn()
            results.append({"check": name, "ok": True, "detail": detail})
            print(f"ok    {name}: {detail}")
        except Exception as e:  # noqa: BLE001 - every failure is reported, the rest still run
            results.append({"check": name, "ok": False, "detail": f"{type(e).__name__}: {e}"})
            print(f"FAIL  {name}: {type(e).__name__}: {e}")
            traceback.print_exc(file=sys.stderr)
        return fn
    return run


def main(argv):
    dev = argv[argv.index("--device") + 1] if "--device" in argv else "cuda"
    if dev == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"skipped": f"PyTorch {torch.__version__} sees no CUDA device"}))
        return 0
    import hsnn.torch as ht

    @check(f"the C++ path is built and takes {dev} tensors")
    def _():
        assert ht._ext is not None, "hsnn._torch was not built (no PyTorch headers?)"
        act = ht.HeteroActivation(FORMULAS * 4)
        z = torch.randn(64, 32, device=dev)
        act(z)
        fast = act._fast[ht._fast_key(z)]
        assert ht._ext.hetero_apply(z, fast) is not None
        loss = ht.FormulaLoss("mse")
        loss(z, torch.zeros_like(z))
        assert ht._ext.loss_apply(z, torch.zeros_like(z), loss._fast[ht._fast_key(z)]) is not None
        return "hetero_apply and loss_apply answered"

    for dtype in (torch.float32, torch.float64):
        @check(f"{dtype}: {dev} values and gradients are the CPU JIT's bits")
        def _():
            act = ht.HeteroActivation(FORMULAS * 32)
            x = torch.randn(1000, 256, dtype=dtype) * 4
            xc = x.to(dev).clone().requires_grad_()
            xh = x.clone().requires_grad_()
            a, ah = act(xc), act(xh)
            g = torch.randn_like(x)
            a.backward(g.to(dev))
            ah.backward(g)
            same = torch.equal(a.detach().cpu(), ah.detach())
            same_grad = torch.equal(xc.grad.cpu(), xh.grad)
            worst = (a.detach().cpu() - ah.detach()).abs().max().item()
            assert same and same_grad, f"values equal {same}, gradients equal {same_grad}, largest difference {worst}"
            return "256000 values and gradients equal"

        @check(f"{dtype}: FormulaLoss keeps its value on the device and gives y_true its gradient")
        def _():
            loss = ht.FormulaLoss("huber", {"delta": 0.5})
            p = torch.randn(4096, dtype=dtype, device=dev, requires_grad=True)
            t = torch.randn(4096, dtype=dtype, device=dev, requires_grad=True)
            v = loss(p, t)
            assert v.device.type == dev and v.dim() == 0 and v.dtype == dtype
            v.backward()
            ref = torch.nn.functional.huber_loss(p.detach().cpu().double(), t.detach().cpu().double(), delta=0.5)
            assert abs(v.item() - ref.item()) <= 1e-6 * abs(ref.item()), (v.item(), ref.item())
            pt, tt = p.detach().clone().requires_grad_(), t.detach().clone().requires_grad_()
            torch.nn.functional.huber_loss(pt, tt, delta=0.5).backward()
            assert torch.allclose(p.grad, pt.grad) and torch.allclose(t.grad, tt.grad)
            return f"value {v.item():.6g} (PyTorch {ref.item():.6g}), both gradients PyTorch's"

    @check(f"gradcheck and gradgradcheck in float64 on {dev}, trainable constants")
    def _():
        act = ht.HeteroActivation([("sin(num)*alpha", {"alpha": 1.5}), "gelu", ("leaky_relu", {"negative_slope": 0.1})],
                                  trainable=True).to(dev)
        z = torch.randn(5, 3, dtype=torch.float64, device=dev, requires_grad=True)
        c = act.constants  # float64, on the device: gradcheck perturbs it in place
        assert torch.autograd.gradcheck(lambda z, c: act(z), (z, c))
        assert torch.autograd.gradgradcheck(lambda z, c: act(z), (z, c))
        loss = ht.FormulaLoss("huber", {"delta": 0.5})
        p = torch.randn(6, dtype=torch.float64, device=dev, requires_grad=True)
        t = torch.randn(6, dtype=torch.float64, device=dev, requires_grad=True)
        assert torch.autograd.gradcheck(loss, (p, t)) and torch.autograd.gradgradcheck(loss, (p, t))
        return "activation in z and its constants, huber in y_pred and y_true"

    @check("a training step makes PyTorch wait for nothing")
    def _():
        model = torch.nn.Sequential(torch.nn.Linear(64, 256), ht.HeteroActivation(FORMULAS * 32),
                                    torch.nn.Linear(256, 1)).to(dev)
        loss = ht.FormulaLoss("mse")
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        x, y = torch.randn(512, 64, device=dev), torch.randn(512, 1, device=dev)
        for _ in range(2):  # the first step compiles
            if dev == "cuda":
                torch.cuda.synchronize()
                torch.cuda.set_sync_debug_mode("error")
            try:
                opt.zero_grad(set_to_none=True)
                loss(model(x), y).backward()
                opt.step()
            finally:
                if dev == "cuda":
                    torch.cuda.set_sync_debug_mode("default")
        return "forward, backward and step" + (" with sync_debug_mode='error'" if dev == "cuda" else "")

    failed = [r["check"] for r in results if not r["ok"]]
    name = torch.cuda.get_device_name() if dev == "cuda" else "cpu"
    print(json.dumps({"torch": torch.__version__, "device": name, "checks": len(results), "failed": failed}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
