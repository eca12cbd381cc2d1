"""hsnn.torch: HeteroActivation and FormulaLoss in PyTorch's autograd."""
import pytest

torch = pytest.importorskip("torch", reason="PyTorch (Debian's python3-torch) is not installed")
import hsnn.torch as ht  # noqa: E402

FORMULAS = ["gelu", ("sin(num)*alpha", {"alpha": 1.5}), "softplus", "tanh", "mish", ("x**3/3", {})]


def test_forward_matches_torch_and_backward_reuses_the_derivative():
    act = ht.HeteroActivation(FORMULAS)
    x = torch.linspace(-2, 2, 7 * 6, dtype=torch.float64).reshape(7, 6).requires_grad_()
    y = act(x)
    want = torch.stack([torch.nn.functional.gelu(x[:, 0]), 1.5 * torch.sin(x[:, 1]),
                        torch.nn.functional.softplus(x[:, 2]), torch.tanh(x[:, 3]),
                        torch.nn.functional.mish(x[:, 4]), x[:, 5] ** 3 / 3], dim=1)
    torch.testing.assert_close(y, want, rtol=1e-12, atol=1e-12)
    y.sum().backward()
    x2 = x.detach().clone().requires_grad_()
    w = torch.stack([torch.nn.functional.gelu(x2[:, 0]), 1.5 * torch.sin(x2[:, 1]),
                     torch.nn.functional.softplus(x2[:, 2]), torch.tanh(x2[:, 3]),
                     torch.nn.functional.mish(x2[:, 4]), x2[:, 5] ** 3 / 3], dim=1)
    w.sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-10, atol=1e-12)


def test_gradcheck_layer_and_losses():
    act = ht.HeteroActivation(FORMULAS)
    x = torch.randn(5, len(FORMULAS), dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(act, (x,))
    for name, constants in [("mse", None), ("huber", {"delta": 0.5}), ("log_cosh", None)]:
        for reduction in ["mean", "sum", "none"]:
            loss = ht.FormulaLoss(name, constants, reduction=reduction)
            yp = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
            yt = torch.randn(4, 3, dtype=torch.float64)
            assert torch.autograd.gradcheck(lambda p: loss(p, yt), (yp,)), (name, reduction)


def test_a_reduced_loss_passes_its_upstream_gradient_on():
    # loss.backward() (upstream 1) returns the fused kernel's gradient as it is;
    # any other upstream multiplies it, as torch's own losses do.
    yp = torch.randn(300, 200, dtype=torch.float64, requires_grad=True)  # pooled results (> 128 KiB)
    yt = torch.randn(300, 200, dtype=torch.float64)
    for reduction in ("mean", "sum"):
        loss = ht.FormulaLoss("mse", reduction=reduction)
        for upstream in (1.0, 2.5, -0.5):
            mine, = torch.autograd.grad(loss(yp, yt) * upstream, yp)
            want, = torch.autograd.grad(torch.nn.functional.mse_loss(yp, yt, reduction=reduction) * upstream, yp)
            torch.testing.assert_close(mine, want, rtol=1e-12, atol=1e-15)


def test_float32_training_reduces_the_loss():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, len(FORMULAS)), ht.HeteroActivation(FORMULAS),
                                torch.nn.Linear(len(FORMULAS), 1))
    x = torch.randn(256, 4)
    y = (x[:, :1] * 2 - x[:, 1:2]).sin()
    loss_fn = ht.FormulaLoss("mse")
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    first = None
    for _ in range(60):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        first = first if first is not None else loss.item()
        loss.backward()
        opt.step()
    assert loss.item() < first / 5


def test_bad_tensors_are_clear_errors():
    act = ht.HeteroActivation(["relu", "tanh"])
    with pytest.raises(ValueError, match=r"expected \(batch, 2\)"):
        act(torch.zeros(3, 3))
    with pytest.raises(ValueError, match="expected torch.float32 or torch.float64"):
        act(torch.zeros(3, 2, dtype=torch.int32))
    with pytest.raises(Exception, match="did you mean 'tanh'"):
        ht.HeteroActivation(["tanhh(x)"])


def test_the_inputs_device_decides_the_method():
    """method="auto" (the default) follows the tensor: CPU tensors the CPU JIT, CUDA tensors the cuda method on their
    device; a CPU method given explicitly refuses a CUDA tensor. (No CUDA tensor can be made here: what the modules
    read of one stands in.)"""
    class OnCuda:
        is_cuda, device = True, torch.device("cuda", 1)

    for module in (ht.HeteroActivation(["tanh"]), ht.FormulaLoss("mse")):
        assert module.method == "auto"
    assert ht._method_for("auto", OnCuda()) == "cuda"
    assert ht._method_for("cuda", OnCuda()) == "cuda"
    with pytest.raises(ValueError, match="the input is on cuda:1; the module's method is 'cpu_jit', which runs on the "
                                         "CPU: use method='auto'"):
        ht._method_for("cpu_jit", OnCuda())
    assert ht._method_for("auto", torch.zeros(1)) in ("cpu_jit", "cpu_interp")
    assert ht._method_for("cpu_interp", torch.zeros(1)) == "cpu_interp"


def test_dlpack_tensors_in_and_the_same_kind_out():
    import hsnn
    layer = hsnn.ActivationLayer(["relu", "tanh"])
    z = torch.linspace(-1, 1, 8).reshape(2, 4)
    a = layer.forward(z)
    assert isinstance(a, torch.Tensor)
    torch.testing.assert_close(a[1], torch.tanh(z[1]))
    fa, fd = layer.fused(z.requires_grad_())
    assert isinstance(fa, torch.Tensor) and isinstance(fd, torch.Tensor)
    loss = hsnn.Loss("mse", dtype="float64")
    yp = torch.tensor([1.0, 2.0], dtype=torch.float64)
    assert loss.forward(yp, torch.zeros(2, dtype=torch.float64)) == pytest.approx(2.5)
    assert isinstance(loss.gradient(yp, torch.zeros(2, dtype=torch.float64)), torch.Tensor)
    with pytest.raises(ValueError, match="has dtype float64; expected float32"):
        layer.forward(torch.zeros(2, 4, dtype=torch.float64))


def test_trainable_constants_pass_gradcheck_and_train_a_prelu_slope():
    formulas = [("Piecewise((num, num > 0), (a*num, True))", {"a": 0.25}), ("sin(num*w)*alpha", {"w": 1.2, "alpha": 0.8}),
                "tanh", ("elu", {"alpha": 0.9})]
    act = ht.HeteroActivation(formulas, trainable=True)
    assert act.params_layout == [(0, "a"), (1, "alpha"), (1, "w"), (3, "alpha")]
    assert [p for p in act.parameters()] == [act.constants]
    x = torch.randn(6, len(formulas), dtype=torch.float64, requires_grad=True)
    c = act.constants

    def f(xx, cc):
        return ht._Apply.apply(xx, cc, act._node(xx))

    assert torch.autograd.gradcheck(f, (x, c.detach().clone().requires_grad_()))

    # A PReLU-style slope learns the data's: y = z for z > 0, 0.6*z below.
    torch.manual_seed(1)
    prelu = ht.HeteroActivation([("Piecewise((num, num > 0), (a*num, True))", {"a": 0.1})], trainable=True)
    opt = torch.optim.SGD(prelu.parameters(), lr=0.5)
    z = torch.randn(512, 1)
    target = torch.where(z > 0, z, 0.6 * z)
    for _ in range(100):
        opt.zero_grad()
        loss = ((prelu(z) - target) ** 2).mean()
        loss.backward()
        opt.step()
    assert abs(prelu.constants.item() - 0.6) < 1e-3


def test_trainable_loss_constants_pass_gradcheck():
    for reduction in ["mean", "sum", "none"]:
        loss = ht.FormulaLoss("huber", {"delta": 0.7}, reduction=reduction, trainable=True)
        assert loss.constant_names == ["delta"]
        yp = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
        yt = torch.randn(5, 3, dtype=torch.float64)
        c = loss.constants.detach().clone().requires_grad_()
        f = lambda p, cc: ht._LossValue.apply(p, yt, cc, loss._node(p), reduction)
        assert torch.autograd.gradcheck(f, (yp, c)), reduction


W1 = ["relu", "sigmoid", "tanh", "gelu", "silu", "softplus", "sin(num)", "0.5*num+0.1"]


@pytest.mark.skipif(ht._ext is None, reason="hsnn._torch not built here (needs Debian's libtorch-dev)")
def test_small_cpu_tensors_take_the_cpp_function_with_the_python_functions_results():
    act = ht.HeteroActivation([W1[j % 8] for j in range(64)])
    for dtype in (torch.float32, torch.float64):
        x = (torch.rand(32, 64, dtype=dtype) * 8 - 4).requires_grad_()
        g = torch.rand(32, 64, dtype=dtype)
        y = act(x)
        assert y.grad_fn.name() == "HeteroActivationBackward"
        y.backward(g)
        x2 = x.detach().clone().requires_grad_()
        y2 = ht._Apply.apply(x2, None, act._node(x2))  # the Python function larger tensors take
        y2.backward(g)
        assert torch.equal(y, y2) and torch.equal(x.grad, x2.grad)
        # create_graph: a backward built of hsnn kernels again, differentiable once more
        (d1,) = torch.autograd.grad(act(x), x, g, create_graph=True)
        (d2,) = torch.autograd.grad(ht._Apply.apply(x2, None, act._node(x2)), x2, g, create_graph=True)
        assert torch.equal(d1, d2) and d1.requires_grad
        assert torch.equal(torch.autograd.grad(d1.sum(), x)[0], torch.autograd.grad(d2.sum(), x2)[0])
    # PyTorch's rules for saved tensors hold: freed after a backward, checked for in-place changes where
    # read (a first-order backward reads only f'(z), saved at the call, so its gradient is still right)
    x = torch.rand(32, 64, requires_grad=True)
    y = act(x)
    y.sum().backward()
    with pytest.raises(RuntimeError, match="second time"):
        y.sum().backward()
    w = torch.rand(32, 64, requires_grad=True)
    z = w.clone()
    y = act(z)
    expected = torch.autograd.grad(act(z), w, torch.ones_like(z))[0]
    z.mul_(2)
    assert torch.equal(torch.autograd.grad(y, w, torch.ones_like(z), retain_graph=True)[0], expected)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        torch.autograd.grad(y, w, torch.ones_like(z), create_graph=True)
    with torch.no_grad():
        assert act(x).grad_fn is None
    big = (torch.rand(64, 1024, requires_grad=True) * 8 - 4).t()  # not contiguous: the Python function
    assert act(big).grad_fn.name() != "HeteroActivationBackward"
    bigc = big.detach().contiguous().requires_grad_()  # 256 KiB: pooled results, the product on TBB's threads
    y = act(bigc)
    assert y.grad_fn.name() == "HeteroActivationBackward" and torch.equal(y, act(big))
    g = torch.rand(1024, 64)
    assert torch.equal(torch.autograd.grad(y, bigc, g)[0], torch.autograd.grad(act(big), big, g)[0])
    assert torch.autograd.gradcheck(act, (torch.rand(3, 64, dtype=torch.float64, requires_grad=True),))
    assert torch.autograd.gradgradcheck(act, (torch.rand(3, 64, dtype=torch.float64, requires_grad=True),))


@pytest.mark.skipif(ht._ext is None, reason="hsnn._torch not built here (needs Debian's libtorch-dev)")
def test_small_cpu_losses_take_the_cpp_node_with_the_python_functions_results():
    for reduction in ("mean", "sum"):
        loss = ht.FormulaLoss("bce", reduction=reduction)
        for dtype in (torch.float32, torch.float64):
            p = (torch.rand(32, 64, dtype=dtype) * 0.98 + 0.01).requires_grad_()
            t = torch.rand(32, 64, dtype=dtype)
            v = loss(p, t)
            assert v.grad_fn.name() == "FormulaLossBackward" and v.dtype == dtype and v.dim() == 0
            p2 = p.detach().clone().requires_grad_()
            v2 = ht._LossValue.apply(p2, t, None, loss._node(p2), reduction)  # the Python function
            assert torch.equal(v, v2)
            for upstream in (1.0, 0.37):
                (g1,) = torch.autograd.grad(v, p, torch.tensor(upstream, dtype=dtype), retain_graph=True)
                (g2,) = torch.autograd.grad(v2, p2, torch.tensor(upstream, dtype=dtype), retain_graph=True)
                assert torch.equal(g1, g2), (reduction, dtype, upstream)
            (d1,) = torch.autograd.grad(loss(p, t), p, create_graph=True)
            (d2,) = torch.autograd.grad(ht._LossValue.apply(p2, t, None, loss._node(p2), reduction), p2,
                                        create_graph=True)
            assert torch.equal(d1, d2) and d1.requires_grad
            assert torch.equal(torch.autograd.grad(d1.sum(), p)[0], torch.autograd.grad(d2.sum(), p2)[0])
        p = torch.rand(3, 4, dtype=torch.float64) * 0.9 + 0.05
        t = torch.rand(3, 4, dtype=torch.float64)
        assert torch.autograd.gradcheck(lambda x: loss(x, t), (p.requires_grad_(),))
        assert torch.autograd.gradgradcheck(lambda x: loss(x, t), (p,))
    loss = ht.FormulaLoss("mse")
    big = torch.rand(64, 1024, requires_grad=True).t()  # not contiguous: the Python function
    assert loss(big, torch.ones(1024, 64)).grad_fn.name() != "FormulaLossBackward"
    bigc = big.detach().contiguous().requires_grad_()
    v = loss(bigc, torch.ones(1024, 64))
    assert v.grad_fn.name() == "FormulaLossBackward" and torch.equal(v, loss(big, torch.ones(1024, 64)))
    assert torch.equal(torch.autograd.grad(v, bigc)[0], torch.autograd.grad(loss(big, torch.ones(1024, 64)), big)[0])
    with pytest.raises(ValueError, match="must match y_pred"):  # refused by the C++ path, explained by Python's
        loss(torch.rand(2, 3), torch.rand(3, 2))
    with torch.no_grad():
        assert loss(torch.rand(2, 3), torch.rand(2, 3)).grad_fn is None
