"""hsnn.torch to any order: gradgradcheck for every built-in and composed
formulas, both modules, trainable or not; third derivatives; the module
conveniences (dtype/device, state_dict, copies, pickles)."""
import copy
import io
import pickle

import pytest

torch = pytest.importorskip("torch", reason="PyTorch (Debian's python3-torch) is not installed")
import hsnn  # noqa: E402
import hsnn.torch as ht  # noqa: E402

ACTIVATIONS = [b["name"] for b in hsnn.builtins() if b["mode"] == "activation"]
LOSSES = [b["name"] for b in hsnn.builtins() if b["mode"] == "loss"]
COMPOSED = [
    ("sin(num*w)*alpha + beta", {"w": 1.3, "alpha": 0.8, "beta": 0.1}),
    ("Piecewise((num**3, num > 0), (a*num, True))", {"a": 0.3}),
    ("Max(num, 0.5*num**2)", {}),
    ("Min(tanh(num), c*num)", {"c": 0.4}),
    ("erf(num*s)*exp(-num**2/2)", {"s": 0.9}),
    ("log(1 + num**2)*k", {"k": 1.7}),
    ("num*sigmoid(b*num)", {"b": 1.2}),
    ("cos(num)**2 + sqrt(num**2 + eps)", {"eps": 0.5}),
    ("Piecewise((exp(num) - 1, num < 0), (num + num**2*q, True))", {"q": 0.25}),
    ("atan(num)*softplus(num)", {}),
    ("num/(1 + Abs(num))**p", {"p": 1.5}),
    ("gelu(num)*g + tanh(num)**3", {"g": 0.6}),
]
KINKS = torch.tensor([0.0, 1.0, -1.0, 3.0, -3.0, 2.0, -2.0])


def away_from_kinks(shape, seed):
    """Random points at least 0.05 from every kink of the formulas above
    (finite differences across a kink measure the jump, not the derivative)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float64) * 1.8
    near = (x.unsqueeze(-1) - KINKS.to(x.dtype)).abs().min(-1).values < 0.05
    return torch.where(near, x + 0.1, x)


def module_with_constants(act):
    return lambda x, c: ht._Apply.apply(x, c, act._node(x))


def test_the_issues_example_differentiates_twice():
    m = ht.HeteroActivation(["tanh", ("sin(num)*alpha", {"alpha": 2.0})])
    x = torch.randn(8, 2, dtype=torch.float64, requires_grad=True)
    g, = torch.autograd.grad(m(x).sum(), x, create_graph=True)
    assert g.requires_grad
    h, = torch.autograd.grad(g.sum(), x)
    want = torch.stack([-2 * torch.tanh(x[:, 0]) * (1 - torch.tanh(x[:, 0]) ** 2), -2.0 * torch.sin(x[:, 1])], 1)
    torch.testing.assert_close(h, want.detach(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("trainable", [False, True])
def test_gradgradcheck_every_builtin_activation(trainable):
    act = ht.HeteroActivation(ACTIVATIONS, trainable=trainable)
    x = away_from_kinks((5, len(ACTIVATIONS)), 1).requires_grad_()
    if trainable:
        assert act.params_layout == [(ACTIVATIONS.index("elu"), "alpha"),
                                     (ACTIVATIONS.index("leaky_relu"), "negative_slope")]
        f, inputs = module_with_constants(act), (x, act.constants.detach().clone().requires_grad_())
    else:
        f, inputs = act, (x,)
    assert torch.autograd.gradcheck(f, inputs)
    assert torch.autograd.gradgradcheck(f, inputs)


@pytest.mark.parametrize("trainable", [False, True])
def test_gradgradcheck_composed_formulas(trainable):
    act = ht.HeteroActivation(COMPOSED, trainable=trainable)
    x = away_from_kinks((4, len(COMPOSED)), 2)
    x[:, 7] = x[:, 7].abs() + 0.1  # sqrt(num**2 + eps) and its neighbours are smooth anyway; keep one column positive
    x.requires_grad_()
    if trainable:
        assert len(act.constants) == 12
        f, inputs = module_with_constants(act), (x, act.constants.detach().clone().requires_grad_())
    else:
        f, inputs = act, (x,)
    assert torch.autograd.gradcheck(f, inputs)
    assert torch.autograd.gradgradcheck(f, inputs)


def test_third_derivatives_through_create_graph_twice():
    act = ht.HeteroActivation(COMPOSED[:6] + ["gelu", "mish"], trainable=True)
    x = away_from_kinks((3, 8), 3).requires_grad_()
    c = act.constants.detach().clone().requires_grad_()
    f = module_with_constants(act)

    def first(xx, cc):
        g, = torch.autograd.grad(f(xx, cc).sum(), xx, create_graph=True)
        return g

    assert torch.autograd.gradgradcheck(first, (x, c))  # f''' and the constants' mixed third derivatives
    d3 = act.derivative(x, order=3)
    g1 = first(x, c)
    g2, = torch.autograd.grad(g1.sum(), x, create_graph=True)
    g3, = torch.autograd.grad(g2.sum(), x)
    torch.testing.assert_close(d3.detach(), g3, rtol=1e-12, atol=1e-12)


def _loss_inputs(name, shape, seed):
    g = torch.Generator().manual_seed(seed)
    yp = torch.randn(shape, generator=g, dtype=torch.float64)
    yt = torch.randn(shape, generator=g, dtype=torch.float64)
    if name == "bce":
        yp, yt = torch.sigmoid(yp) * 0.9 + 0.05, torch.rand(shape, generator=g, dtype=torch.float64)
    if name in ("bce_with_logits", "poisson_nll"):
        yt = torch.rand(shape, generator=g, dtype=torch.float64)
    # mae, huber and smooth_l1 have kinks where |y_pred - y_true| is 0 or the constant (1)
    d = yp - yt
    bad = (d.abs() < 0.05) | ((d.abs() - 1).abs() < 0.05)
    return torch.where(bad, yp + 0.2, yp), yt


@pytest.mark.parametrize("name", LOSSES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_gradgradcheck_every_builtin_loss(name, reduction):
    """In y_pred, y_true and the constants together, to the second order."""
    yp, yt = _loss_inputs(name, (4, 3), 4)
    # bce's eps (1e-7) would step below its domain (>= 0) in gradcheck's differences
    loss = ht.FormulaLoss(name, {"eps": 0.01} if name == "bce" else None, reduction=reduction, trainable=True)
    c = loss.constants.detach().clone().requires_grad_()
    f = lambda p, t, cc: ht._LossValue.apply(p, t, cc, loss._node(p), reduction)
    yp.requires_grad_()
    yt.requires_grad_()
    inputs = (yp, yt, c) if len(c) else (yp, yt)
    g = f if len(c) else (lambda p, t: f(p, t, None))
    assert torch.autograd.gradcheck(g, inputs)
    assert torch.autograd.gradgradcheck(g, inputs)
    plain = ht.FormulaLoss(name, reduction=reduction)
    assert torch.autograd.gradgradcheck(lambda p, t: plain(p, t), (yp, yt))
    assert torch.autograd.gradgradcheck(lambda p: plain(p, yt.detach()), (yp,))


def test_a_computed_target_gets_its_gradient_as_in_pytorch():
    """FormulaLoss(p, t) with t requiring grad (distillation, a physics residual): t.grad as PyTorch's own loss
    gives it, first order on the C++ path's inputs (float32, small) and with create_graph."""
    g = torch.Generator().manual_seed(7)
    p0, t0 = torch.randn(6, generator=g), torch.randn(6, generator=g)
    for dtype in (torch.float32, torch.float64):
        p, t = p0.to(dtype, copy=True).requires_grad_(), t0.to(dtype, copy=True).requires_grad_()
        ht.FormulaLoss("huber", {"delta": 0.5})(p, t).backward()
        q, u = p0.to(dtype, copy=True).requires_grad_(), t0.to(dtype, copy=True).requires_grad_()
        torch.nn.functional.huber_loss(q, u, delta=0.5).backward()
        torch.testing.assert_close(t.grad, u.grad)
        torch.testing.assert_close(p.grad, q.grad)
        assert t.grad.abs().sum() > 0.1
    # only the target needs it: y_pred a plain tensor
    t = t0.clone().requires_grad_()
    ht.FormulaLoss("(y_pred - y_true)**2", reduction="sum")(p0, t).backward()
    torch.testing.assert_close(t.grad, -2 * (p0 - t0))
    # second order in y_true: d/dt of dL/dt for mse is 2/n per element
    t = t0.double().requires_grad_()
    gt, = torch.autograd.grad(ht.FormulaLoss("mse")(p0.double(), t), t, create_graph=True)
    h, = torch.autograd.grad(gt.sum(), t)
    torch.testing.assert_close(h, torch.full_like(h, 2 / 6))


def test_composed_losses_to_third_order():
    loss = ht.FormulaLoss("(y_pred - y_true)**2*w + log(cosh(y_pred - y_true))*k", {"w": 0.5, "k": 2.0},
                          reduction="mean", trainable=True)
    yp, yt = _loss_inputs("x", (6,), 5)
    yp.requires_grad_()
    c = loss.constants.detach().clone().requires_grad_()
    f = lambda p, cc: ht._LossValue.apply(p, yt, cc, loss._node(p), "mean")

    def first(p, cc):
        g, = torch.autograd.grad(f(p, cc), p, create_graph=True)
        return g

    assert torch.autograd.gradgradcheck(first, (yp, c))


def test_a_physics_residual_trains_through_second_derivatives():
    # u(x) = net(x); fit u'' = -u with u(0) = 0, u'(0) = 1: the loss holds u'', so the step needs f'''.
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(1, 8), ht.HeteroActivation(["sin(num)", "tanh", "gelu", "softplus"] * 2),
                              torch.nn.Linear(8, 1)).double()
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    x = torch.linspace(0, 3, 32, dtype=torch.float64).reshape(-1, 1).requires_grad_()
    losses = []
    for _ in range(40):
        opt.zero_grad()
        u = net(x)
        du, = torch.autograd.grad(u.sum(), x, create_graph=True)
        d2u, = torch.autograd.grad(du.sum(), x, create_graph=True)
        x0 = torch.zeros(1, 1, dtype=torch.float64, requires_grad=True)
        u0 = net(x0)
        du0, = torch.autograd.grad(u0.sum(), x0, create_graph=True)
        loss = ((d2u + u) ** 2).mean() + (u0 ** 2).sum() + ((du0 - 1) ** 2).sum()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] / 3


def test_dtype_device_state_dict_copies_and_pickles():
    act = ht.HeteroActivation([("sin(num)*alpha", {"alpha": 2.0}), ("elu", {"alpha": 0.5}), "relu"], trainable=True,
                              dtype=torch.float32, device="cpu")
    assert act.constants.dtype == torch.float32 and act.constants.device.type == "cpu"
    plain = ht.HeteroActivation(["relu"], dtype=torch.float32)
    assert list(plain.state_dict()) == []  # no trainable constants, nothing to save

    with torch.no_grad():
        act.constants.copy_(torch.tensor([1.5, 0.25]))
    state = act.state_dict()
    assert list(state) == ["constants"]
    other = ht.HeteroActivation([("sin(num)*alpha", {"alpha": 2.0}), ("elu", {"alpha": 0.5}), "relu"], trainable=True,
                                dtype=torch.float32)
    other.load_state_dict(state)
    z = torch.randn(5, 3)
    torch.testing.assert_close(other(z), act(z))
    torch.testing.assert_close(act(z)[:, 0], 1.5 * torch.sin(z[:, 0]))

    buffer = io.BytesIO()
    torch.save(act, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)  # weights_only=True by default from PyTorch 2.6: hsnn's modules are allowed
    for clone in (copy.deepcopy(act), pickle.loads(pickle.dumps(act)), loaded):
        torch.testing.assert_close(clone(z), act(z))
        with torch.no_grad():
            clone.constants[0] = 3.0  # owns its constants
        assert act.constants[0].item() == 1.5
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    g, = torch.autograd.grad(copy.deepcopy(act)(x).sum(), x, create_graph=True)
    assert g.requires_grad

    loss = ht.FormulaLoss("huber", {"delta": 0.5}, trainable=True, dtype=torch.float32)
    assert loss.constants.dtype == torch.float32
    yp, yt = torch.randn(7), torch.randn(7)
    for clone in (copy.deepcopy(loss), pickle.loads(pickle.dumps(loss))):
        torch.testing.assert_close(clone(yp, yt), loss(yp, yt))
    fresh = ht.FormulaLoss("huber", trainable=True, dtype=torch.float32)
    fresh.load_state_dict(loss.state_dict())
    torch.testing.assert_close(fresh(yp, yt), loss(yp, yt))


@pytest.mark.skipif(not hasattr(torch.serialization, "safe_globals"), reason="PyTorch < 2.5 has no weights_only allow-list context")
def test_whole_models_load_with_weights_only():
    """torch.load's default (weights_only=True since 2.6) rebuilds hsnn's modules; a model's own classes are named
    as the Python guide shows, and an hsnn module's state cannot smuggle in a class that is not allowed."""
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), ht.HeteroActivation([("sin(num)*alpha", {"alpha": 2.0}), "gelu"],
                                                                          trainable=True, dtype=torch.float32))
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    with torch.serialization.safe_globals([torch.nn.Sequential, torch.nn.Linear]):
        loaded = torch.load(buffer, weights_only=True)
    x = torch.randn(4, 3)
    torch.testing.assert_close(loaded(x), model(x))
    buffer.seek(0)
    with pytest.raises(pickle.UnpicklingError, match="Sequential"):
        torch.load(buffer, weights_only=True)  # the model's class is not on the list: refused, named


def test_out_takes_torch_tensors_and_returns_them():
    layer = hsnn.ActivationLayer(["tanh", "relu"], layout="batch_major")
    z = torch.randn(6, 2)
    out = torch.empty_like(z)
    assert layer.forward(z, out=out) is out
    torch.testing.assert_close(out, layer.forward(z))
    delta = torch.full_like(z, 7.0)
    assert layer.backward(z, torch.ones_like(z), out=delta) is delta
    torch.testing.assert_close(delta[:, 0], 1 - torch.tanh(z[:, 0]) ** 2)
    with pytest.raises(ValueError, match="'out' holds|shape"):
        layer.forward(z, out=torch.empty(3, 2))
