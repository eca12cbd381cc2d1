"""PyTorch modules over hsnn kernels.

``HeteroActivation(formulas)`` is an ``nn.Module`` over ``(batch, nodes)``
tensors (the frameworks' layout): node ``j`` applies ``formulas[j]``. Its
forward runs the fused kernel, so backward reuses f'(z) without running the
formula again. ``FormulaLoss(formula)`` is a loss module whose gradient
comes from hsnn's symbolic derivative. Both take CPU tensors of float32 or
float64 (zero-copy through NumPy); their gradients pass
``torch.autograd.gradcheck`` in float64.
"""
import numpy as np
import torch

from . import _core

_DTYPES = {torch.float32: "float32", torch.float64: "float64"}


def _numpy_dtype(t, what):
    if t.device.type != "cpu":
        raise ValueError(f"{what} is on {t.device}; hsnn.torch runs on CPU tensors")
    if t.dtype not in _DTYPES:
        raise ValueError(f"{what} has dtype {t.dtype}; expected torch.float32 or torch.float64")
    return _DTYPES[t.dtype]


class _TrainableHeteroFunction(torch.autograd.Function):
    """The same with the layer's constants as an input: their gradient is
    the sum over the batch of grad * df/dc, from hsnn's d/dc tapes."""

    @staticmethod
    def forward(ctx, z, constants, layer):
        values = constants.detach().to(torch.float64).contiguous().numpy()
        layer.set_params(values)
        zc = z.detach().contiguous()
        a, dfdz = layer.fused(zc.numpy())
        ctx.layer, ctx.values = layer, values
        ctx.save_for_backward(zc, torch.from_numpy(dfdz))
        ctx.constants_dtype = constants.dtype
        return torch.from_numpy(a)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        zc, dfdz = ctx.saved_tensors
        grad_c = None
        if ctx.needs_input_grad[1]:
            g = grad.detach().to(zc.dtype).contiguous()
            ctx.layer.set_params(ctx.values)  # another forward may have changed them since
            grad_c = torch.from_numpy(ctx.layer.constant_gradients(zc.numpy(), g.numpy())).to(ctx.constants_dtype)
        return _times(grad, dfdz), grad_c, None


class _HeteroFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z, layer):
        zc = z.detach().contiguous()
        a, dfdz = layer.fused(zc.numpy())
        ctx.save_for_backward(torch.from_numpy(dfdz))
        return torch.from_numpy(a)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        (dfdz,) = ctx.saved_tensors
        return _times(grad, dfdz), None


def _times(grad, derivative):
    """grad * derivative through NumPy: elementwise ops of some PyTorch builds
    (Debian's 1.13) run 10-20x slower than NumPy's on the same memory."""
    g = grad.detach()
    if g.device.type != "cpu" or g.dtype != derivative.dtype:
        return grad * derivative
    out = np.empty(derivative.shape, dtype=derivative.numpy().dtype)
    np.multiply(g.numpy(), derivative.numpy(), out=out)
    return torch.from_numpy(out)


class HeteroActivation(torch.nn.Module):
    """A per-node activation: ``formulas[j]`` (a formula, a built-in name, or a
    ``(formula, constants)`` pair) applied to column ``j`` of ``(batch, nodes)``.

    Layers are compiled on first use for each dtype (float32, float64) and kept.
    With ``trainable=True`` the nodes' constants (``alpha`` in ``sin(num)*alpha``,
    leaky_relu's ``negative_slope``, ...) form the ``nn.Parameter``
    ``constants`` (float64, one entry per constant in ``params_layout``
    order) and are trained with the rest of the model.
    """

    def __init__(self, formulas, method="auto", trainable=False):
        super().__init__()
        self.formulas = list(formulas)
        self.method = method
        self._layers = {}
        if not self.formulas:
            raise ValueError("HeteroActivation needs at least one formula")
        layer = self._layer("float32")  # formula errors show at construction
        self.trainable = trainable
        if trainable:
            self.constants = torch.nn.Parameter(torch.tensor(layer.params, dtype=torch.float64))

    @property
    def params_layout(self):
        """(node, constant name) of each entry of ``constants``."""
        layer = self._layer("float32")
        return [(n, name) for n in range(layer.num_nodes) for name in layer.constant_names(n)]

    def _layer(self, dtype):
        if dtype not in self._layers:
            self._layers[dtype] = _core.ActivationLayer(self.formulas, dtype=dtype, layout="batch_major",
                                                        method=self.method)
        return self._layers[dtype]

    @property
    def num_nodes(self):
        return len(self.formulas)

    def forward(self, z):
        dtype = _numpy_dtype(z, "the input")
        if z.dim() != 2 or z.shape[1] != self.num_nodes:
            raise ValueError(f"the input has shape {tuple(z.shape)}; expected (batch, {self.num_nodes})")
        if self.trainable:
            return _TrainableHeteroFunction.apply(z, self.constants, self._layer(dtype))
        return _HeteroFunction.apply(z, self._layer(dtype))

    def extra_repr(self):
        shown = ", ".join(f if isinstance(f, str) else f[0] for f in self.formulas[:4])
        return f"nodes={self.num_nodes}, formulas=[{shown}{', ...' if self.num_nodes > 4 else ''}]"


class _LossFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y_pred, y_true, loss):
        yp = y_pred.detach().contiguous()
        yt = y_true.detach().contiguous()
        if loss.reduction == "none":
            value = torch.from_numpy(loss.forward_elements(yp.numpy(), yt.numpy()))
            grad = torch.from_numpy(loss.gradient(yp.numpy(), yt.numpy()))
        else:
            v, g = loss.fused(yp.numpy(), yt.numpy())
            value, grad = torch.tensor(v, dtype=y_pred.dtype), torch.from_numpy(g)
        ctx.save_for_backward(grad)
        return value

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        (grad,) = ctx.saved_tensors
        return _times(grad_out.expand_as(grad), grad), None, None


class _TrainableLossFunction(torch.autograd.Function):
    """A loss with its constants as an input (reduction mean or sum)."""

    @staticmethod
    def forward(ctx, y_pred, y_true, constants, loss, names):
        values = constants.detach().to(torch.float64).tolist()
        for name, v in zip(names, values):
            loss.set_constant(name, v)
        yp = y_pred.detach().contiguous()
        yt = y_true.detach().contiguous()
        v, g = loss.fused(yp.numpy(), yt.numpy())
        ctx.loss, ctx.names, ctx.values, ctx.constants_dtype = loss, names, values, constants.dtype
        ctx.save_for_backward(yp, yt, torch.from_numpy(g))
        return torch.tensor(v, dtype=y_pred.dtype)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        yp, yt, grad = ctx.saved_tensors
        grad_c = None
        if ctx.needs_input_grad[2]:
            for name, v in zip(ctx.names, ctx.values):
                ctx.loss.set_constant(name, v)
            dc = torch.from_numpy(ctx.loss.constant_gradients(yp.numpy(), yt.numpy()))
            grad_c = (dc * grad_out.detach().to(torch.float64)).to(ctx.constants_dtype)
        return _times(grad_out.expand_as(grad), grad), None, grad_c, None, None


class FormulaLoss(torch.nn.Module):
    """A loss written as a formula in ``y_pred`` and ``y_true`` (or a built-in
    name: mse, huber, bce, ...), differentiated with respect to ``y_pred``.
    ``reduction`` is "mean", "sum" or "none". ``y_true`` gets no gradient.
    With ``trainable=True`` (mean or sum) the loss's constants (huber's
    ``delta``, ...) form the ``nn.Parameter`` ``constants`` (float64, in
    ``constant_names`` order)."""

    def __init__(self, formula, constants=None, reduction="mean", method="auto", trainable=False):
        super().__init__()
        self.formula, self.initial, self.reduction, self.method = formula, dict(constants or {}), reduction, method
        self._losses = {}
        loss = self._loss("float32")
        self.trainable = trainable
        self.constant_names = loss.constant_names()
        if trainable:
            if reduction == "none":
                raise ValueError("trainable constants need reduction 'mean' or 'sum', not reduction 'none'")
            self.constants = torch.nn.Parameter(
                torch.tensor([loss.constant(n) for n in self.constant_names], dtype=torch.float64))

    def _loss(self, dtype):
        if dtype not in self._losses:
            self._losses[dtype] = _core.Loss(self.formula, self.initial, reduction=self.reduction, dtype=dtype,
                                             method=self.method)
        return self._losses[dtype]

    def forward(self, y_pred, y_true):
        dtype = _numpy_dtype(y_pred, "y_pred")
        if y_true.dtype != y_pred.dtype or y_true.shape != y_pred.shape:
            raise ValueError(f"y_true ({y_true.dtype}, {tuple(y_true.shape)}) must match y_pred "
                             f"({y_pred.dtype}, {tuple(y_pred.shape)})")
        if self.trainable:
            return _TrainableLossFunction.apply(y_pred, y_true, self.constants, self._loss(dtype), self.constant_names)
        return _LossFunction.apply(y_pred, y_true, self._loss(dtype))

    def extra_repr(self):
        return f"formula={self.formula!r}, reduction={self.reduction!r}"
