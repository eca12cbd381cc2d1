"""PyTorch modules over hsnn kernels, differentiable to any order.

``HeteroActivation(formulas)`` is an ``nn.Module`` over ``(batch, nodes)``
tensors (the frameworks' layout): node ``j`` applies ``formulas[j]``.
``FormulaLoss(formula)`` is a loss module in ``y_pred`` and ``y_true``. Both
take float32 or float64 tensors on the CPU (zero-copy through NumPy) or on a
CUDA device (the cuda method, zero-copy through DLPack).

First-order training runs the fused kernel forward (f and f' in one pass)
and reuses f' backward. Under ``create_graph=True`` (physics-informed losses,
gradient penalties, Hessian-vector products) the backward is itself built of
hsnn kernels: f'' and f''' come from layers of the formulas' symbolic
derivatives (``derivative_layer``), and a trainable constant's second
derivatives from the constants' tangent layer (``constant_tangent_layer``),
each compiled when first needed. Their gradients pass
``torch.autograd.gradcheck`` and ``gradgradcheck`` in float64. The
derivative rules are hsnn/_torch_rules.py's, shared with the custom
operators torch.compile traces (hsnn/_torch_ops.py); the autograd functions
here supply them the kernels.
"""
import numpy as np
import torch

from . import _core, _torch_rules as _rules
from . import ActivationLayer as _Layer, Loss as _Loss, _capsule, _cpu_method, _stream_for

try:  # the C++ autograd function for small CPU tensors, where it was built (libtorch's headers)
    from . import _torch as _ext
except ImportError:
    _ext = None

# The kernels as custom operators, what torch.compile traces (PyTorch >= 2.4;
# before it, compiled graphs break around the modules' autograd functions).
if hasattr(torch.library, "custom_op") and hasattr(torch.library, "register_autograd"):
    from . import _torch_ops as _ops
    _compiling = torch.compiler.is_compiling
else:
    _ops = None
    _compiling = lambda: False

_DTYPES = {torch.float32: "float32", torch.float64: "float64"}


def _hsnn_dtype(t, what):
    if t.dtype not in _DTYPES:
        raise ValueError(f"{what} has dtype {t.dtype}; expected torch.float32 or torch.float64")
    if t.device.type not in ("cpu", "cuda"):
        raise ValueError(f"{what} is on {t.device}; hsnn.torch runs on CPU and CUDA tensors")
    return _DTYPES[t.dtype]


def _host(t):
    """A contiguous host NumPy view of t (no copy for a contiguous CPU tensor)."""
    if t.is_contiguous() and not t.is_cuda:
        return t.detach().numpy()
    return t.detach().contiguous().cpu().numpy()


# From this many bytes on a result comes from hsnn's pool of recycled blocks
# (python/src/OutputPool.h): a fresh one would be an mmap whose pages fault
# in on first write (1.5 ms of a 2 ms call at 4096 x 256 in a fresh process).
# Below it PyTorch's own product is cheaper than a call into hsnn.
_POOLED_BYTES = _core._min_pooled_bytes


def _method_for(method, t):
    """The method a module's kernels for tensor t are compiled with: the
    tensor's device decides under "auto" (CUDA tensors: the cuda method on
    their device); a CPU method given explicitly refuses CUDA tensors."""
    if not t.is_cuda:
        return _cpu_method(method)
    if method not in ("auto", "cuda"):
        raise ValueError(f"the input is on {t.device}; the module's method is {method!r}, which runs on the CPU: "
                         "use method='auto' (the input's device decides) or 'cuda'")
    return "cuda"


def _fast_key(t):
    """Which of a module's hsnn._torch objects serves tensor t: CPU ones by
    dtype, CUDA ones by dtype and device."""
    return (t.dtype, t.device.index) if t.is_cuda else t.dtype


def _times(grad, derivative):
    """grad * derivative; a large CPU product on hsnn's threads into a pooled array."""
    g = grad.detach()
    if g.is_cuda or g.dtype != derivative.dtype or g.shape != derivative.shape or \
            g.numel() * g.element_size() < _POOLED_BYTES:
        return grad * derivative
    return torch.from_numpy(_core._multiply(g.contiguous().numpy(), derivative.numpy()))


class _Node:
    """A layer of one derivative chain (one dtype and device) and the layers
    its backward needs, each compiled at first use: ``d`` (the formulas
    differentiated in num) and ``t`` (their constants' tangent), with how a
    tangent layer's params are packed from (constants, direction)."""

    def __init__(self, layer):
        self.layer = layer
        self._d = self._t = None
        self.perm = self.cpart = None  # set on a tangent node
        # hsnn._torch's backward when it must be differentiable (create_graph)
        self.slow_backward = lambda z, grad: _rules.activation_grads(_Differentiable, z, None, self, grad, None,
                                                                     (True, False))[0]

    @property
    def d(self):
        if self._d is None:
            self._d = _Node(self.layer.derivative_layer(1))
        return self._d

    @property
    def t(self):
        if self._t is None:
            t = _Node(self.layer.constant_tangent_layer())
            offsets, size = list(self.layer.offsets), len(self.layer.params)
            perm, cpart = [], []
            for n, start in enumerate(offsets):
                end = offsets[n + 1] if n + 1 < len(offsets) else size
                cpart += range(len(perm), len(perm) + end - start)
                perm += list(range(start, end)) + list(range(size + start, size + end))
            t.perm, t.cpart = torch.tensor(perm, dtype=torch.long), torch.tensor(cpart, dtype=torch.long)
            self._t = t
        return self._t

    def pack(self, c, direction):
        """A tangent layer's params: per node, its constants then the direction."""
        return torch.cat([c, direction.to(c.dtype)])[self.perm.to(c.device)]

    def set(self, c):
        if c is not None:
            self.layer.set_params(_host(c.to(torch.float64)))

    # The kernels, on host arrays (CPU tensors: views) or CUDA tensors.
    def fused(self, z):
        if z.is_cuda:
            return self.layer.fused(z.detach().contiguous())
        a, d = _core.ActivationLayer.fused(self.layer, _host(z))
        return torch.from_numpy(a), torch.from_numpy(d)

    def forward(self, z):
        if z.is_cuda:
            return self.layer.forward(z.detach().contiguous())
        return torch.from_numpy(_core.ActivationLayer.forward(self.layer, _host(z)))

    def backward(self, z, err):
        if z.is_cuda:
            return self.layer.backward(z.detach().contiguous(), err.detach().contiguous())
        return torch.from_numpy(_core.ActivationLayer.backward(self.layer, _host(z), _host(err.to(z.dtype))))

    def constant_gradients(self, z, err, dtype):
        # Host arrays: a GPU layer copies them to its device and sums there.
        g = self.layer.constant_gradients(_host(z), _host(err.to(z.dtype)))
        return torch.from_numpy(g).to(dtype=dtype, device=z.device)


class _Kernels:
    """The rules' ops (hsnn/_torch_rules.py) for a backward that builds no
    graph: the kernels themselves, each after setting its node's constants
    (another call may have changed them since); large CPU products on
    hsnn's threads."""

    @staticmethod
    def times(h, x):
        # loss.backward()'s upstream 1 is no product (reading it would wait for a CUDA device)
        if h.dim() == 0 and not h.is_cuda and h.item() == 1.0:
            return x
        return _times(h, x)

    @staticmethod
    def apply(z, c, node):
        node.set(c)
        return node.fused(z)[0]

    @staticmethod
    def backward(z, c, err, node):
        node.set(c)
        return node.backward(z, err)

    @staticmethod
    def constant_gradient(z, c, err, node):
        node.set(c)
        return node.constant_gradients(z, err, c.dtype)

    @staticmethod
    def elements(y_pred, y_true, c, node):
        node.set(c)
        return node.run("forward_elements", y_pred, y_true)

    @staticmethod
    def pack(z, c, h, tangent):
        return tangent.pack(c, h)

    @staticmethod
    def constant_part(z, c, g, tangent):
        return g[tangent.cpart.to(c.device)]


class _Differentiable(_Kernels):
    """The rules' ops under create_graph: each kernel an autograd function
    below, so that the backward is differentiable again."""

    @staticmethod
    def times(h, x):
        return h * x

    @staticmethod
    def apply(z, c, node):
        return _Apply.apply(z, c, node)

    @staticmethod
    def backward(z, c, err, node):
        return _Backward.apply(z, c, err, node)

    @staticmethod
    def constant_gradient(z, c, err, node):
        return _ConstantGradient.apply(z, c, err, node)

    @staticmethod
    def elements(y_pred, y_true, c, node):
        return _LossElements.apply(y_pred, y_true, c, node)


def _backward_ops():
    """The ops for the backward now running: differentiable under create_graph."""
    return _Differentiable if torch.is_grad_enabled() else _Kernels


class _Apply(torch.autograd.Function):
    """a = f(z; c), f' saved from the same fused kernel: at first order the
    backward multiplies by it; under create_graph (where it is no part of the
    graph) the backward kernel gives grad * f'."""

    @staticmethod
    def forward(ctx, z, c, node):
        node.set(c)
        a, dfdz = node.fused(z)
        ctx.node = node
        ctx.save_for_backward(z, c, dfdz)
        return a

    @staticmethod
    def backward(ctx, grad):
        z, c, dfdz = ctx.saved_tensors
        if torch.is_grad_enabled():
            return _rules.activation_grads(_Differentiable, z, c, ctx.node, grad, None, ctx.needs_input_grad) + (None,)
        return _rules.activation_grads(_Kernels, z, c, ctx.node, grad, None, ctx.needs_input_grad, dfdz) + (None,)


class _Backward(torch.autograd.Function):
    """delta = err * f'(z; c), one fused kernel."""

    @staticmethod
    def forward(ctx, z, c, err, node):
        ctx.node = node
        ctx.save_for_backward(z, c, err)
        return _Kernels.backward(z, c, err, node)

    @staticmethod
    def backward(ctx, h):
        z, c, err = ctx.saved_tensors
        return _rules.backward_grads(_backward_ops(), z, c, err, ctx.node, h, ctx.needs_input_grad) + (None,)


class _ConstantGradient(torch.autograd.Function):
    """g_c = sum over the batch of err * df/dc (one entry per constant)."""

    @staticmethod
    def forward(ctx, z, c, err, node):
        ctx.node = node
        ctx.save_for_backward(z, c, err)
        return _Kernels.constant_gradient(z, c, err, node)

    @staticmethod
    def backward(ctx, h):
        z, c, err = ctx.saved_tensors
        return _rules.constant_gradient_grads(_backward_ops(), z, c, err, ctx.node, h, ctx.needs_input_grad) + (None,)


class HeteroActivation(torch.nn.Module):
    """A per-node activation: ``formulas[j]`` (a formula, a built-in name, or a
    ``(formula, constants)`` pair) applied to column ``j`` of ``(batch, nodes)``.

    Layers are compiled on first use for each dtype and device, and kept.
    With ``trainable=True`` the nodes' constants (``alpha`` in
    ``sin(num)*alpha``, leaky_relu's ``negative_slope``, ...) form the
    ``nn.Parameter`` ``constants`` (one entry per constant in
    ``params_layout`` order; ``dtype`` and ``device`` as ``nn.Linear``'s,
    float64 by default) and are trained with the rest of the model. Inputs
    may be float32 or float64, on the CPU or a CUDA device, whatever the
    constants' dtype.
    """

    def __init__(self, formulas, method="auto", trainable=False, dtype=None, device=None):
        super().__init__()
        self.formulas = list(formulas)
        self.method = method
        self._nodes = {}
        if not self.formulas:
            raise ValueError("HeteroActivation needs at least one formula")
        probe = _Layer(self.formulas, dtype="float32", layout="batch_major", method="cpu_interp")  # errors now
        self.trainable = trainable
        self._fast = {} if _ext is not None and not trainable else None  # CPU layers by dtype, for hsnn._torch
        self.params_layout = [(n, name) for n in range(probe.num_nodes) for name in probe.constant_names(n)]
        constants = torch.tensor(probe.params, dtype=dtype or torch.float64, device=device)
        if trainable:
            self.constants = torch.nn.Parameter(constants)
        else:
            self.register_buffer("constants", constants, persistent=False)
        self._op_key = _ops.register(self) if _ops is not None else None

    @property
    def num_nodes(self):
        return len(self.formulas)

    def _node(self, z):
        key = (z.dtype, z.device)
        node = self._nodes.get(key)
        if node is None:
            method = _method_for(self.method, z)
            layer = _Layer(self.formulas, dtype=_DTYPES[z.dtype], layout="batch_major", method=method,
                           gpu_id=z.device.index or 0 if z.is_cuda else 0)
            node = self._nodes[key] = _Node(layer)
            if self._fast is not None:
                self._fast[_fast_key(z)] = _ext.Fast(layer, node.slow_backward, self.num_nodes,
                                                     z.device.index or 0 if z.is_cuda else -1)
        return node

    def forward(self, z):
        if _compiling():  # torch.compile: one custom operator in the graph
            return torch.ops.hsnn.activation(z, self.constants if self.trainable else None, self._op_key, "")[0]
        # Contiguous CPU and CUDA tensors: one C++ autograd function, which
        # checks them itself (the Python function's glue and these checks were
        # half the call at 32 x 64); it answers None for anything else.
        fast = self._fast.get(_fast_key(z)) if self._fast is not None else None
        if fast is not None:
            a = _ext.hetero_apply(z, fast)
            if a is not None:
                return a
        _hsnn_dtype(z, "the input")
        if z.dim() != 2 or z.shape[1] != self.num_nodes:
            raise ValueError(f"the input has shape {tuple(z.shape)}; expected (batch, {self.num_nodes})")
        node = self._node(z)
        if self._fast is not None:  # a first call: the node is made now
            a = _ext.hetero_apply(z, self._fast[_fast_key(z)])
            if a is not None:
                return a
        return _Apply.apply(z, self.constants if self.trainable else None, node)

    def derivative(self, z, order=1):
        """f^(order)(z), per node, as a tensor differentiable again (to any order)."""
        node = self._node(z)
        for _ in range(order):
            node = node.d
        return _Apply.apply(z, self.constants if self.trainable else None, node)

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_nodes"] = {}  # compiled layers: made again at first use
        state["_fast"] = {} if state.get("_fast") is not None else None
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        self._op_key = _ops.register(self) if _ops is not None else None  # a copy is a module of its own

    def extra_repr(self):
        shown = ", ".join(f if isinstance(f, str) else f[0] for f in self.formulas[:4])
        return (f"nodes={self.num_nodes}, formulas=[{shown}{', ...' if self.num_nodes > 4 else ''}]"
                f"{', trainable=True' if self.trainable else ''}")


class _LossNode:
    """A loss of one derivative chain (one dtype and device) and the losses
    its backward needs: ``d`` (d/dy_pred), ``dt`` (d/dy_true) and
    ``c(name)`` (d/d constant), each compiled at first use."""

    def __init__(self, loss, names):
        self.loss, self.names = loss, names
        self._d, self._dt, self._c = None, None, {}

    @property
    def d(self):
        if self._d is None:
            self._d = _LossNode(self.loss.derivative_loss(1), self.names)
        return self._d

    @property
    def dt(self):
        if self._dt is None:
            self._dt = _LossNode(self.loss.target_derivative_loss(), self.names)
        return self._dt

    def c(self, name):
        if name not in self._c:
            self._c[name] = _LossNode(self.loss.constant_derivative_loss(name), self.names)
        return self._c[name]

    def set(self, c):
        if c is not None:
            for name, v in zip(self.names, c.detach().to(torch.float64).tolist()):
                self.loss.set_constant(name, v)

    def fused_value(self, yp, yt):
        """(the reduced loss as a 0-d tensor on yp's device, its gradient): on
        CUDA queued on the current stream, the value left on the device."""
        if not yp.is_cuda:
            v, grad = self.run("fused", yp, yt)
            return torch.tensor(v, dtype=yp.dtype, device=yp.device), grad
        yp, yt = yp.detach().contiguous(), yt.detach().contiguous()
        grad, value = torch.empty_like(yp), yp.new_empty(())
        stream = _stream_for(yp, None)
        self.loss._run_device(4, [_capsule(x, stream) for x in (yp, yt, grad, value)], stream)
        return value, grad

    def gradient(self, yp, yt, c):
        """dl/dy_pred per element (unscaled: for reduction none)."""
        self.set(c)
        return self.run("gradient", yp, yt)

    def constant_gradients(self, yp, yt, c):
        """The reduced loss's gradient in its constants (float64, on c's device)."""
        self.set(c)
        return torch.from_numpy(self.loss.constant_gradients(_host(yp), _host(yt))).to(c.device)

    def run(self, which, yp, yt):
        if yp.is_cuda:
            return getattr(self.loss, which)(yp.detach().contiguous(), yt.detach().contiguous())
        r = getattr(_core.Loss, which)(self.loss, _host(yp), _host(yt))
        if isinstance(r, tuple):
            return r[0], torch.from_numpy(r[1])
        return torch.from_numpy(r) if isinstance(r, np.ndarray) else r


class _LossValue(torch.autograd.Function):
    """The reduced loss (mean or sum) and its gradient from one fused kernel,
    or the elements (none). At first order the backward multiplies the saved
    gradient and, for constants, runs the loss's constant-gradient kernel;
    under create_graph (the saved gradient being no part of the graph) the
    derivative losses' elements give both."""

    @staticmethod
    def forward(ctx, y_pred, y_true, c, node, reduction):
        node.set(c)
        ctx.node, ctx.reduction, ctx.scale = node, reduction, _rules.reduction_scale(reduction, y_pred)
        if reduction == "none":
            value, grad = node.run("forward_elements", y_pred, y_true), None
        else:
            value, grad = node.fused_value(y_pred, y_true)
        ctx.save_for_backward(y_pred, y_true, c, grad)
        return value

    @staticmethod
    def backward(ctx, grad_out):
        yp, yt, c, grad = ctx.saved_tensors
        node, needs = ctx.node, ctx.needs_input_grad
        if torch.is_grad_enabled():
            return _rules.value_grads(_Differentiable, yp, yt, c, node, ctx.scale, grad_out, None, needs) + (None, None)
        fused, constants = grad, None
        if ctx.reduction == "none":  # no fused kernel ran: the loss's gradient kernel
            fused = node.gradient(yp, yt, c) if needs[0] else None
        elif needs[2]:
            constants = node.constant_gradients(yp, yt, c)
        return _rules.value_grads(_Kernels, yp, yt, c, node, ctx.scale, grad_out, None, needs, fused,
                                  constants) + (None, None)


class _LossElements(torch.autograd.Function):
    """l(y_pred, y_true; c) per element, differentiable to any order."""

    @staticmethod
    def forward(ctx, y_pred, y_true, c, node):
        ctx.node = node
        ctx.save_for_backward(y_pred, y_true, c)
        return _Kernels.elements(y_pred, y_true, c, node)

    @staticmethod
    def backward(ctx, h):
        yp, yt, c = ctx.saved_tensors
        return _rules.elements_grads(_backward_ops(), h, yp, yt, c, ctx.node, ctx.needs_input_grad) + (None,)


class FormulaLoss(torch.nn.Module):
    """A loss written as a formula in ``y_pred`` and ``y_true`` (or a built-in
    name: mse, huber, bce, ...), differentiated with respect to ``y_pred``
    and ``y_true`` (to any order: a target computed by the model, as in
    distillation or a physics residual, gets its gradient from the formula's
    symbolic dl/dy_true). ``reduction`` is "mean", "sum" or "none". With ``trainable=True`` the loss's constants (huber's
    ``delta``, ...) form the ``nn.Parameter`` ``constants`` (in
    ``constant_names`` order; ``dtype``/``device`` as ``nn.Linear``'s,
    float64 by default)."""

    def __init__(self, formula, constants=None, reduction="mean", method="auto", trainable=False, dtype=None,
                 device=None):
        super().__init__()
        self.formula, self.initial, self.reduction, self.method = formula, dict(constants or {}), reduction, method
        self._nodes = {}
        self._fast = {} if _ext is not None and not trainable and reduction != "none" else None  # for hsnn._torch
        probe = _Loss(formula, self.initial, reduction=reduction, dtype="float32", method="cpu_interp")
        self.trainable = trainable
        self.constant_names = probe.constant_names()
        values = torch.tensor([probe.constant(n) for n in self.constant_names], dtype=dtype or torch.float64,
                              device=device)
        if trainable:
            self.constants = torch.nn.Parameter(values)
        else:
            self.register_buffer("constants", values, persistent=False)
        self._op_key = _ops.register(self) if _ops is not None else None

    def _node(self, y):
        key = (y.dtype, y.device)
        node = self._nodes.get(key)
        if node is None:
            method = _method_for(self.method, y)
            loss = _Loss(self.formula, self.initial, reduction=self.reduction, dtype=_DTYPES[y.dtype], method=method)
            if y.is_cuda:
                loss.set_gpu_id(y.device.index or 0)
            node = self._nodes[key] = _LossNode(loss, self.constant_names)
            if self._fast is not None:
                reduction = self.reduction  # not self: the module would hold itself through its C++ object
                slow = lambda yp, yt, g: _rules.value_grads(_Differentiable, yp, yt, None, node,
                                                            _rules.reduction_scale(reduction, yp), g, None,
                                                            (True, False, False))[0]
                self._fast[_fast_key(y)] = _ext.FastLoss(loss, slow, y.device.index or 0 if y.is_cuda else -1)
        return node

    def forward(self, y_pred, y_true):
        if _compiling():  # torch.compile: one custom operator in the graph
            c = self.constants if self.trainable else None
            if self.reduction == "none":
                return torch.ops.hsnn.loss_elements(y_pred, y_true, c, self._op_key, "")
            return torch.ops.hsnn.loss(y_pred, y_true, c, self._op_key, "")[0]
        # Contiguous CPU and CUDA tensors: one C++ call and an autograd node
        # (hsnn._torch), None for anything else, as HeteroActivation.
        # (Its autograd node differentiates in y_pred only: a target that
        # requires grad takes the Python function.)
        fast = self._fast.get(_fast_key(y_pred)) if self._fast is not None and not y_true.requires_grad else None
        if fast is not None:
            value = _ext.loss_apply(y_pred, y_true, fast)
            if value is not None:
                return value
        _hsnn_dtype(y_pred, "y_pred")
        if y_true.dtype != y_pred.dtype or y_true.shape != y_pred.shape or y_true.device != y_pred.device:
            raise ValueError(f"y_true ({y_true.dtype}, {tuple(y_true.shape)}, {y_true.device}) must match y_pred "
                             f"({y_pred.dtype}, {tuple(y_pred.shape)}, {y_pred.device})")
        node = self._node(y_pred)
        if self._fast is not None and not y_true.requires_grad:  # a first call: made now
            value = _ext.loss_apply(y_pred, y_true, self._fast[_fast_key(y_pred)])
            if value is not None:
                return value
        return _LossValue.apply(y_pred, y_true, self.constants if self.trainable else None, node, self.reduction)

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_nodes"] = {}
        state["_fast"] = {} if state.get("_fast") is not None else None
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        self._op_key = _ops.register(self) if _ops is not None else None

    def extra_repr(self):
        return f"formula={self.formula!r}, reduction={self.reduction!r}{', trainable=True' if self.trainable else ''}"


# torch.load unpickles with weights_only=True by default since PyTorch 2.6:
# only classes on its allow-list are rebuilt. hsnn's modules are put on it:
# their pickled state is formula text, names, numbers and tensors, and
# formula text is parsed, never executed. A model that holds them also needs
# its own classes there (torch.nn.Sequential, ...): see docs/guide/python.md.
if hasattr(torch.serialization, "add_safe_globals"):
    torch.serialization.add_safe_globals([HeteroActivation, FormulaLoss])
