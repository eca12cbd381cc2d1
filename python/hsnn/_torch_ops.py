"""hsnn.torch's kernels as PyTorch custom operators (``torch.library``,
PyTorch >= 2.4), which is how ``torch.compile`` sees them: opaque calls with a
fake kernel for shapes and autograd formulas made of these operators again,
so a compiled graph holds them without a graph break, and eager calls of the
operators differentiate to any order.

An operator names its kernel by the module's key (``register``) and a path
from the module's layer or loss for the input's dtype and device: steps
joined by ",": "d" (d/dnum or d/dy_pred), "t" (the constants' tangent of an
activation), "y" (d/dy_true), "c:NAME" (d/d constant NAME). Their autograd
formulas are hsnn/_torch_rules.py's, which the eager modules' autograd
functions (hsnn/torch.py) share: here each kernel a rule runs is an operator
again. The modules' eager forward keeps those functions, which are cheaper
per call; the compiled forward calls these operators.
"""
import itertools
import weakref
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from . import _torch_rules as _rules

_modules = {}  # key -> weakref of the module
_keys = itertools.count(1)


def register(module):
    """A key for `module` (a HeteroActivation or FormulaLoss) that the
    operators find it by, for as long as it lives. A string: Dynamo makes an
    int that differs between calls a symbolic one, which names no module."""
    key = f"{type(module).__name__}:{next(_keys)}"
    _modules[key] = weakref.ref(module, lambda _, k=key: _modules.pop(k, None))
    return key


def _module(key):
    ref = _modules.get(key)
    module = ref() if ref is not None else None
    if module is None:
        raise RuntimeError(f"hsnn: the module this call was compiled for (key {key}) no longer exists")
    return module


def _steps(path):
    return path.split(",") if path else []


def _join(path, step):
    return f"{path},{step}" if path else step


def _activation_node(key, z, path):
    node = _module(key)._node(z)
    for step in _steps(path):
        node = node.d if step == "d" else node.t
    return node


def _loss_node(key, y, path):
    node = _module(key)._node(y)
    for step in _steps(path):
        node = node.d if step == "d" else node.dt if step == "y" else node.c(step[2:])
    return node


class _Path:
    """A node for the rules (hsnn/_torch_rules.py): a module's key and a path,
    its derivatives one step longer. Only the operators' own kernels resolve
    it to a compiled layer or loss (for the input's dtype and device)."""

    __slots__ = ("key", "path")

    def __init__(self, key, path):
        self.key, self.path = key, path

    def _then(self, step):
        return _Path(self.key, _join(self.path, step))

    d = property(lambda self: self._then("d"))
    t = property(lambda self: self._then("t"))
    dt = property(lambda self: self._then("y"))

    def c(self, name):
        return self._then("c:" + name)

    @property
    def names(self) -> List[str]:
        return _module(self.key).constant_names


class _Operators:
    """The rules' ops: each kernel one of the operators below, so that a
    backward is made of them again (differentiable, and traceable)."""

    @staticmethod
    def times(h, x):
        return h * x

    @staticmethod
    def apply(z, c, node):
        return activation(z, c, node.key, node.path)[0]

    @staticmethod
    def backward(z, c, err, node):
        return activation_backward(z, c, err, node.key, node.path)

    @staticmethod
    def constant_gradient(z, c, err, node):
        return activation_constant_gradient(z, c, err, node.key, node.path)

    @staticmethod
    def elements(y_pred, y_true, c, node):
        return loss_elements(y_pred, y_true, c, node.key, node.path)

    # The permutations as constants made here, not the node's tensors: a
    # traced backward (AOTAutograd) can hold no tensor made outside it.
    @staticmethod
    def pack(z, c, h, tangent):
        perm = _activation_node(tangent.key, z, tangent.path).perm
        return torch.cat([c, h.to(c.dtype)])[torch.tensor(perm.tolist(), device=c.device)]

    @staticmethod
    def constant_part(z, c, g, tangent):
        cpart = _activation_node(tangent.key, z, tangent.path).cpart
        return g[torch.tensor(cpart.tolist(), device=c.device)]


# --- activations ------------------------------------------------------------

@torch.library.custom_op("hsnn::activation", mutates_args=())
def activation(z: Tensor, c: Optional[Tensor], key: str, path: str) -> Tuple[Tensor, Tensor]:
    """(f(z), f'(z)) of the node at `path`: one fused kernel."""
    node = _activation_node(key, z, path)
    node.set(c)
    a, d = node.fused(z)
    return a, d


@activation.register_fake
def _(z, c, key, path):
    nodes = _module(key).num_nodes
    if z.dim() != 2 or z.shape[1] != nodes:
        raise ValueError(f"the input has shape {tuple(z.shape)}; expected (batch, {nodes})")
    return z.new_empty(z.shape), z.new_empty(z.shape)


@torch.library.custom_op("hsnn::activation_backward", mutates_args=())
def activation_backward(z: Tensor, c: Optional[Tensor], err: Tensor, key: str, path: str) -> Tensor:
    """err * f'(z)."""
    node = _activation_node(key, z, path)
    node.set(c)
    return node.backward(z, err)


@activation_backward.register_fake
def _(z, c, err, key, path):
    return z.new_empty(z.shape)


@torch.library.custom_op("hsnn::activation_constant_gradient", mutates_args=())
def activation_constant_gradient(z: Tensor, c: Tensor, err: Tensor, key: str, path: str) -> Tensor:
    """The sum over the batch of err * df/dc, one entry per constant."""
    node = _activation_node(key, z, path)
    node.set(c)
    return node.constant_gradients(z, err, c.dtype)


@activation_constant_gradient.register_fake
def _(z, c, err, key, path):
    return c.new_empty(c.shape)


def _activation_setup(ctx, inputs, output):
    z, c, key, path = inputs
    ctx.key, ctx.path = key, path
    ctx.save_for_backward(z, c, output[1])
    ctx.set_materialize_grads(False)  # an output nothing used gives None, not a kernel run on zeros


def _activation_grad(ctx, grad_a, grad_d):
    # The saved f' is the operator's output, itself differentiable: a second
    # derivative reaches f'' through grad_d.
    z, c, dfdz = ctx.saved_tensors
    return _rules.activation_grads(_Operators, z, c, _Path(ctx.key, ctx.path), grad_a, grad_d, ctx.needs_input_grad,
                                   dfdz) + (None, None)


def _save_inputs(ctx, inputs, output):
    """For operators of three tensors, a key and a path: all of them."""
    *tensors, key, path = inputs
    ctx.key, ctx.path = key, path
    ctx.save_for_backward(*tensors)


def _backward_grad(ctx, h):
    z, c, err = ctx.saved_tensors
    return _rules.backward_grads(_Operators, z, c, err, _Path(ctx.key, ctx.path), h,
                                 ctx.needs_input_grad) + (None, None)


def _constant_gradient_grad(ctx, h):
    z, c, err = ctx.saved_tensors
    return _rules.constant_gradient_grads(_Operators, z, c, err, _Path(ctx.key, ctx.path), h,
                                          ctx.needs_input_grad) + (None, None)


activation.register_autograd(_activation_grad, setup_context=_activation_setup)
activation_backward.register_autograd(_backward_grad, setup_context=_save_inputs)
activation_constant_gradient.register_autograd(_constant_gradient_grad, setup_context=_save_inputs)


# --- losses -----------------------------------------------------------------

@torch.library.custom_op("hsnn::loss", mutates_args=())
def loss(y_pred: Tensor, y_true: Tensor, c: Optional[Tensor], key: str, path: str) -> Tuple[Tensor, Tensor]:
    """(the loss reduced as the module's reduction says, mean or sum; its
    gradient in y_pred scaled alike): one fused kernel."""
    node = _loss_node(key, y_pred, path)
    node.set(c)
    return node.fused_value(y_pred, y_true)


@loss.register_fake
def _(y_pred, y_true, c, key, path):
    return y_pred.new_empty(()), y_pred.new_empty(y_pred.shape)


@torch.library.custom_op("hsnn::loss_elements", mutates_args=())
def loss_elements(y_pred: Tensor, y_true: Tensor, c: Optional[Tensor], key: str, path: str) -> Tensor:
    """The loss at `path` per element."""
    node = _loss_node(key, y_pred, path)
    node.set(c)
    return node.run("forward_elements", y_pred, y_true)


@loss_elements.register_fake
def _(y_pred, y_true, c, key, path):
    return y_pred.new_empty(y_pred.shape)


def _loss_setup(ctx, inputs, output):
    y_pred, y_true, c, key, path = inputs
    ctx.key, ctx.path, ctx.scale = key, path, _rules.reduction_scale(_module(key).reduction, y_pred)
    ctx.save_for_backward(y_pred, y_true, c, output[1])
    ctx.set_materialize_grads(False)


def _loss_grad(ctx, grad_value, grad_grad):
    # The saved gradient is the operator's output, itself differentiable: a
    # second derivative reaches l_dd through grad_grad.
    y_pred, y_true, c, grad = ctx.saved_tensors
    return _rules.value_grads(_Operators, y_pred, y_true, c, _Path(ctx.key, ctx.path), ctx.scale, grad_value,
                              grad_grad, ctx.needs_input_grad, fused=grad) + (None, None)


def _elements_grad(ctx, h):
    y_pred, y_true, c = ctx.saved_tensors
    return _rules.elements_grads(_Operators, h, y_pred, y_true, c, _Path(ctx.key, ctx.path),
                                 ctx.needs_input_grad) + (None, None)


loss.register_autograd(_loss_grad, setup_context=_loss_setup)
loss_elements.register_autograd(_elements_grad, setup_context=_save_inputs)
