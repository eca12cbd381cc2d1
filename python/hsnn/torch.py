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
``torch.autograd.gradcheck`` and ``gradgradcheck`` in float64.
"""
import numpy as np
import torch

from . import _core
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
        self.slow_backward = lambda z, grad: _Backward.apply(z, None, grad, self)

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


class _Apply(torch.autograd.Function):
    """a = f(z; c). Backward: err * f'(z) and sum err * df/dc; under
    create_graph both as the differentiable functions below."""

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
        node, gz, gc = ctx.node, None, None
        if torch.is_grad_enabled():  # create_graph: a backward that is itself differentiable
            if ctx.needs_input_grad[0]:
                gz = _Backward.apply(z, c, grad, node)
            if ctx.needs_input_grad[1]:
                gc = _ConstantGradient.apply(z, c, grad, node)
            return gz, gc, None
        if ctx.needs_input_grad[0]:
            gz = _times(grad, dfdz)
        if ctx.needs_input_grad[1]:
            node.set(c)  # another call may have changed them since
            gc = node.constant_gradients(z, grad, c.dtype)
        return gz, gc, None


class _Backward(torch.autograd.Function):
    """delta = err * f'(z; c), one fused kernel. Its derivatives: in z,
    err * h * f''; in c, the sum of err * h * df'/dc; in err, h * f'."""

    @staticmethod
    def forward(ctx, z, c, err, node):
        node.set(c)
        ctx.node = node
        ctx.save_for_backward(z, c, err)
        return node.backward(z, err)

    @staticmethod
    def backward(ctx, h):
        z, c, err = ctx.saved_tensors
        node, gz, gc, gerr = ctx.node, None, None, None
        if ctx.needs_input_grad[0] or ctx.needs_input_grad[1]:
            eh = err * h
            if ctx.needs_input_grad[0]:
                gz = _Backward.apply(z, c, eh, node.d)
            if ctx.needs_input_grad[1]:
                gc = _ConstantGradient.apply(z, c, eh, node.d)
        if ctx.needs_input_grad[2]:
            gerr = _Backward.apply(z, c, h, node)
        return gz, gc, gerr, None


class _ConstantGradient(torch.autograd.Function):
    """g_c = sum over the batch of err * df/dc (one entry per constant). Its
    derivatives along a direction h (one per constant) come from the tangent
    layer's formulas sum_i h_i * df/dc_i: in err, that layer's forward; in z,
    its backward; in c, its own constant gradient."""

    @staticmethod
    def forward(ctx, z, c, err, node):
        node.set(c)
        ctx.node = node
        ctx.save_for_backward(z, c, err)
        return node.constant_gradients(z, err, c.dtype)

    @staticmethod
    def backward(ctx, h):
        z, c, err = ctx.saved_tensors
        node, gz, gc, gerr = ctx.node, None, None, None
        tangent = node.t
        packed = tangent.pack(c, h)
        if ctx.needs_input_grad[2]:
            gerr = _Apply.apply(z, packed, tangent)
        if ctx.needs_input_grad[0]:
            gz = _Backward.apply(z, packed, err, tangent)
        if ctx.needs_input_grad[1]:
            gc = _ConstantGradient.apply(z, packed, err, tangent)[tangent.cpart.to(c.device)]
        return gz, gc, gerr, None


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

    def run(self, which, yp, yt):
        if yp.is_cuda:
            return getattr(self.loss, which)(yp.detach().contiguous(), yt.detach().contiguous())
        r = getattr(_core.Loss, which)(self.loss, _host(yp), _host(yt))
        if isinstance(r, tuple):
            return r[0], torch.from_numpy(r[1])
        return torch.from_numpy(r) if isinstance(r, np.ndarray) else r


def _by_constants(h, yp, yt, c, node):
    """sum over the elements of h * dl/dc, one entry per constant, differentiable."""
    if not node.names:
        return torch.zeros(0, dtype=c.dtype, device=c.device)
    return torch.stack([(h * _LossElements.apply(yp, yt, c, node.c(name))).sum() for name in node.names]).to(c.dtype)


class _LossValue(torch.autograd.Function):
    """The reduced loss (mean or sum) or its elements (none), from one fused
    kernel; under create_graph the backward runs the derivative losses."""

    @staticmethod
    def forward(ctx, y_pred, y_true, c, node, reduction):
        node.set(c)
        ctx.node, ctx.reduction = node, reduction
        if reduction == "none":
            value, grad = node.run("forward_elements", y_pred, y_true), None
        else:
            value, grad = node.fused_value(y_pred, y_true)
        ctx.save_for_backward(y_pred, y_true, c, grad)
        return value

    @staticmethod
    def backward(ctx, grad_out):
        yp, yt, c, grad = ctx.saved_tensors
        node, reduction = ctx.node, ctx.reduction
        scale = 1.0 / yp.numel() if reduction == "mean" and yp.numel() else 1.0
        gyp = gyt = gc = None
        if torch.is_grad_enabled():  # create_graph: a backward that is itself differentiable
            weight = grad_out * scale
            if ctx.needs_input_grad[0]:
                gyp = weight * _LossElements.apply(yp, yt, c, node.d)
            if ctx.needs_input_grad[1]:
                gyt = weight * _LossElements.apply(yp, yt, c, node.dt)
            if ctx.needs_input_grad[2]:
                gc = _by_constants(weight, yp, yt, c, node)
            return gyp, gyt, gc, None, None
        if ctx.needs_input_grad[1]:  # a target that is computed: dl/dy_true per element
            node.dt.set(c)
            gyt = _times(grad_out * scale if reduction != "none" else grad_out,
                         node.dt.run("forward_elements", yp, yt))
        if reduction == "none":
            if ctx.needs_input_grad[0]:
                node.set(c)
                gyp = _times(grad_out, node.run("gradient", yp, yt))
            if ctx.needs_input_grad[2]:
                gc = _by_constants(grad_out, yp, yt, c, node)
            return gyp, gyt, gc, None, None
        if ctx.needs_input_grad[0]:
            # The fused kernel's gradient is already scaled; an upstream 1
            # (loss.backward()) leaves it as it is, no product.
            g = grad_out.detach()
            gyp = grad if not g.is_cuda and g.item() == 1.0 else grad * g
        if ctx.needs_input_grad[2]:
            node.set(c)
            dc = node.loss.constant_gradients(_host(yp), _host(yt))
            gc = (torch.from_numpy(dc).to(c.device) * grad_out.detach().to(torch.float64)).to(c.dtype)
        return gyp, gyt, gc, None, None


class _LossElements(torch.autograd.Function):
    """l(y_pred, y_true; c) per element, differentiable to any order."""

    @staticmethod
    def forward(ctx, y_pred, y_true, c, node):
        node.set(c)
        ctx.node = node
        ctx.save_for_backward(y_pred, y_true, c)
        return node.run("forward_elements", y_pred, y_true)

    @staticmethod
    def backward(ctx, h):
        yp, yt, c = ctx.saved_tensors
        node, gyp, gyt, gc = ctx.node, None, None, None
        if ctx.needs_input_grad[0]:
            gyp = h * _LossElements.apply(yp, yt, c, node.d)
        if ctx.needs_input_grad[1]:
            gyt = h * _LossElements.apply(yp, yt, c, node.dt)
        if ctx.needs_input_grad[2]:
            gc = _by_constants(h, yp, yt, c, node)
        return gyp, gyt, gc, None


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
                mean = self.reduction == "mean"
                slow = lambda yp, yt, g: g * (1.0 / yp.numel() if mean else 1.0) * _LossElements.apply(yp, yt, None,
                                                                                                     node.d)
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
