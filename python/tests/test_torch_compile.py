"""hsnn.torch under torch.compile: the kernels as custom operators (hsnn/_torch_ops.py), no graph break, the eager
results; and the operators themselves checked by torch.library.opcheck and differentiated to the second order."""
import pytest

torch = pytest.importorskip("torch", reason="PyTorch (Debian's python3-torch) is not installed")
if not hasattr(torch.library, "custom_op"):
    pytest.skip(f"PyTorch {torch.__version__} has no torch.library.custom_op (2.4+): modules keep their autograd "
                "functions, which torch.compile cannot trace", allow_module_level=True)

import torch._dynamo  # noqa: E402

import hsnn.torch as ht  # noqa: E402

FORMULAS = ["gelu", "tanh", ("sin(num)*alpha", {"alpha": 1.5}), "softplus", ("leaky_relu", {"negative_slope": 0.1}),
            "silu", "Piecewise((num, num > 0), (0.2*num, True))", "mish"]


def _model(seed=0, trainable=False):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), ht.HeteroActivation(FORMULAS * 32, trainable=trainable),
                               torch.nn.Linear(256, 1))


def _data(seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(128, 64, generator=g), torch.randn(128, 1, generator=g)


def _step(model, loss_fn, x, y):
    model.zero_grad()
    value = loss_fn(model(x), y)
    value.backward()
    return value.detach(), [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("trainable", [False, True])
def test_a_fresh_model_compiles_without_graph_breaks(trainable):
    model, loss_fn = _model(trainable=trainable), ht.FormulaLoss("huber", {"delta": 0.5}, trainable=trainable)
    x, y = _data()

    def step(x, y):
        return loss_fn(model(x), y)

    explained = torch._dynamo.explain(step)(x, y)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1


@pytest.mark.parametrize("backend", ["inductor", "aot_eager"])
def test_fullgraph_compile_matches_eager(backend):
    torch._dynamo.reset()
    x, y = _data()
    eager, loss_fn = _model(trainable=True), ht.FormulaLoss("huber", {"delta": 0.5}, trainable=True)
    compiled_model = _model(trainable=True)
    compiled_loss = ht.FormulaLoss("huber", {"delta": 0.5}, trainable=True)
    want, want_grads = _step(eager, loss_fn, x, y)
    step = torch.compile(lambda x, y: compiled_loss(compiled_model(x), y), fullgraph=True, backend=backend)
    compiled_model.zero_grad()
    got = step(x, y)
    got.backward()
    torch.testing.assert_close(got.detach(), want)
    for g, w in zip((p.grad for p in compiled_model.parameters()), want_grads):
        torch.testing.assert_close(g, w)
    # every reduction and a computed target, as eager
    for reduction in ("sum", "none"):
        loss = ht.FormulaLoss("log(cosh(y_pred - y_true))", reduction=reduction)
        p, t = torch.randn(5, 3, requires_grad=True), torch.randn(5, 3, requires_grad=True)
        got = torch.compile(lambda p, t: loss(p, t), fullgraph=True, backend=backend)(p, t)
        gp, gt = torch.autograd.grad(got.sum(), (p, t))
        want = loss(p, t)
        wp, wt = torch.autograd.grad(want.sum(), (p, t))
        torch.testing.assert_close(got, want)
        torch.testing.assert_close((gp, gt), (wp, wt))


def test_second_derivatives_under_compile_are_right_or_refused():
    """PyTorch cannot double-backward through an AOT-compiled graph (its issues 91469, 181581): the second
    derivative is eager's or a clear error, never a silent wrong value."""
    act = ht.HeteroActivation(["tanh", "softplus", ("sin(num)*alpha", {"alpha": 2.0})], dtype=torch.float64)
    f = torch.compile(lambda z: act(z), fullgraph=True, backend="aot_eager")
    z = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    g, = torch.autograd.grad(f(z).sum(), z, create_graph=True)
    want_g, = torch.autograd.grad(act(z).sum(), z, create_graph=True)
    torch.testing.assert_close(g, want_g)
    want_h, = torch.autograd.grad(want_g.sum(), z)
    try:
        h, = torch.autograd.grad(g.sum(), z)
    except RuntimeError as e:
        assert "double backward" in str(e) or "does not require grad" in str(e), e
    else:
        torch.testing.assert_close(h, want_h)


def _activation_args(dtype=torch.float64, trainable=True):
    act = ht.HeteroActivation(["tanh", ("sin(num)*alpha", {"alpha": 2.0}), ("elu", {"alpha": 0.5})],
                              trainable=trainable, dtype=dtype)
    z = torch.randn(5, 3, dtype=dtype, requires_grad=True)
    c = act.constants.detach().clone().requires_grad_() if trainable else None
    return act, z, c


def test_the_operators_pass_opcheck():
    act, z, c = _activation_args()
    err = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    ops = torch.ops.hsnn
    torch.library.opcheck(ops.activation.default, (z, c, act._op_key, ""))
    torch.library.opcheck(ops.activation_backward.default, (z, c, err, act._op_key, ""))
    torch.library.opcheck(ops.activation_constant_gradient.default, (z, c, err, act._op_key, ""))
    loss = ht.FormulaLoss("huber", {"delta": 0.5}, trainable=True)
    p, t = torch.randn(7, dtype=torch.float32, requires_grad=True), torch.randn(7, requires_grad=True)
    lc = loss.constants.detach().clone().requires_grad_()
    torch.library.opcheck(ops.loss.default, (p, t, lc, loss._op_key, ""))
    torch.library.opcheck(ops.loss_elements.default, (p, t, lc, loss._op_key, "d"))


def test_the_operators_differentiate_to_the_second_order():
    """gradcheck and gradgradcheck through the operators alone, as a compiled graph's backward calls them."""
    act, z, c = _activation_args()
    key = act._op_key
    f = lambda z, c: torch.ops.hsnn.activation(z, c, key, "")[0]
    assert torch.autograd.gradcheck(f, (z, c))
    assert torch.autograd.gradgradcheck(f, (z, c))
    loss = ht.FormulaLoss("huber", {"delta": 0.7}, trainable=True)
    p = (torch.randn(6, dtype=torch.float64) * 2).requires_grad_()
    t = torch.randn(6, dtype=torch.float64, requires_grad=True)
    lc = loss.constants.detach().clone().requires_grad_()
    for reduction in ("mean", "sum"):
        loss = ht.FormulaLoss("huber", {"delta": 0.7}, reduction=reduction, trainable=True)
        g = lambda p, t, c: torch.ops.hsnn.loss(p, t, c, loss._op_key, "")[0]
        assert torch.autograd.gradcheck(g, (p, t, lc))
        assert torch.autograd.gradgradcheck(g, (p, t, lc))
    e = lambda p, t, c: torch.ops.hsnn.loss_elements(p, t, c, loss._op_key, "")
    assert torch.autograd.gradgradcheck(e, (p, t, lc))


def test_a_wrong_shape_is_named_while_compiling():
    act = ht.HeteroActivation(["tanh", "relu"])
    f = torch.compile(lambda z: act(z), fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match=r"expected \(batch, 2\)"):
        f(torch.randn(3, 5))


def test_copies_are_operators_of_their_own():
    import copy
    import pickle
    act = ht.HeteroActivation([("sin(num)*alpha", {"alpha": 2.0})], trainable=True, dtype=torch.float64)
    clones = [copy.deepcopy(act), pickle.loads(pickle.dumps(act))]
    with torch.no_grad():
        clones[0].constants.fill_(3.0)
    z = torch.randn(4, 1, dtype=torch.float64)
    f = torch.compile(lambda m, z: m(z), fullgraph=True, backend="aot_eager")
    assert len({act._op_key, *(c._op_key for c in clones)}) == 3
    torch.testing.assert_close(f(clones[0], z), 3.0 * torch.sin(z))
    torch.testing.assert_close(f(act, z), 2.0 * torch.sin(z))
