"""hsnn.torch's kernels as PyTorch custom operators (``torch.library``,
PyTorch >= 2.4), which is how ``torch.compile`` sees them: opaque calls with a
fake kernel for shapes and autograd formulas made of these operators again,
so a compiled graph holds them without a graph break, and eager calls of the
operators differentiate to any order.

An operator names its kernel by the module's key (``register``) and a path
from the module's layer or loss for the input's dtype and device: steps
joined by ",": "d" (d/dnum or d/dy_pred), "t" (the constants' tangent of an
activation), "y" (d/dy_true), "c:NAME" (d/d constant NAME). The modules'
eager forward keeps its own autograd functions (hsnn/torch.py), which are
cheaper per call; the compiled forward calls these.
"""
import itertools
import weakref
from typing import List, Optional, Tuple

import torch
from torch import Tensor

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


def _add(a, b):
    return b if a is None else a if b is None else a + b


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
    # a = f(z), d = f'(z): in z, grad_a * f' (the saved output, itself
    # differentiable: a second derivative reaches f'' through grad_d) and
    # grad_d * f''; in c, the constant gradients of both.
    z, c, dfdz = ctx.saved_tensors
    key, path = ctx.key, ctx.path
    gz = gc = None
    if ctx.needs_input_grad[0]:
        gz = _add(grad_a * dfdz if grad_a is not None else None,
                  activation_backward(z, c, grad_d, key, _join(path, "d")) if grad_d is not None else None)
    if ctx.needs_input_grad[1]:
        gc = _add(activation_constant_gradient(z, c, grad_a, key, path) if grad_a is not None else None,
                  activation_constant_gradient(z, c, grad_d, key, _join(path, "d")) if grad_d is not None else None)
    return gz, gc, None, None


def _save_inputs(ctx, inputs, output):
    """For operators of three tensors, a key and a path: all of them."""
    *tensors, key, path = inputs
    ctx.key, ctx.path = key, path
    ctx.save_for_backward(*tensors)


def _backward_grad(ctx, h):
    # delta = err * f'(z; c): in z, err * h * f''; in c, sum err * h * df'/dc; in err, h * f'.
    z, c, err = ctx.saved_tensors
    key, path = ctx.key, ctx.path
    gz = gc = gerr = None
    if ctx.needs_input_grad[0]:
        gz = activation_backward(z, c, err * h, key, _join(path, "d"))
    if ctx.needs_input_grad[1]:
        gc = activation_constant_gradient(z, c, err * h, key, _join(path, "d"))
    if ctx.needs_input_grad[2]:
        gerr = activation_backward(z, c, h, key, path)
    return gz, gc, gerr, None, None


def _constant_gradient_grad(ctx, h):
    # g = sum err * df/dc; along a direction h over the constants, the tangent
    # layer's formulas sum_i h_i df/dc_i: in err its forward, in z its
    # backward, in c its own constant gradient (the constants' part).
    z, c, err = ctx.saved_tensors
    key, path = ctx.key, ctx.path
    tangent_path = _join(path, "t")
    tangent = _activation_node(key, z, tangent_path)
    # The permutation as a constant made here, not the node's tensor: a traced
    # backward (AOTAutograd) can hold no tensor made outside it.
    packed = torch.cat([c, h.to(c.dtype)])[torch.tensor(tangent.perm.tolist(), device=c.device)]
    gz = gc = gerr = None
    if ctx.needs_input_grad[2]:
        gerr = activation(z, packed, key, tangent_path)[0]
    if ctx.needs_input_grad[0]:
        gz = activation_backward(z, packed, err, key, tangent_path)
    if ctx.needs_input_grad[1]:
        gc = activation_constant_gradient(z, packed, err, key, tangent_path)[
            torch.tensor(tangent.cpart.tolist(), device=c.device)]
    return gz, gc, gerr, None, None


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


def _by_constants(h, y_pred, y_true, c, key, path):
    """sum of h * dl/dc, one entry per constant, differentiable."""
    names: List[str] = _module(key).constant_names
    if not names:
        return c.new_zeros(0)
    return torch.stack([(h * loss_elements(y_pred, y_true, c, key, _join(path, "c:" + n))).sum() for n in names]).to(
        c.dtype)


def _loss_grads(ctx, h, y_pred, y_true, c, path, skip_y_pred=False):
    """h * (dl/dy_pred, dl/dy_true, dl/dc) of the loss at `path`, for the inputs that need them."""
    key = ctx.key
    gyp = gyt = gc = None
    if ctx.needs_input_grad[0] and not skip_y_pred:
        gyp = h * loss_elements(y_pred, y_true, c, key, _join(path, "d"))
    if ctx.needs_input_grad[1]:
        gyt = h * loss_elements(y_pred, y_true, c, key, _join(path, "y"))
    if ctx.needs_input_grad[2]:
        gc = _by_constants(h, y_pred, y_true, c, key, path)
    return gyp, gyt, gc


def _loss_setup(ctx, inputs, output):
    y_pred, y_true, c, key, path = inputs
    mean = _module(key).reduction == "mean"
    ctx.key, ctx.path, ctx.scale = key, path, 1.0 / y_pred.numel() if mean and y_pred.numel() else 1.0
    ctx.save_for_backward(y_pred, y_true, c, output[1])
    ctx.set_materialize_grads(False)


def _loss_grad(ctx, grad_value, grad_grad):
    # value = scale * sum l, grad = scale * l_d per element (the saved output:
    # differentiable, so a second derivative reaches l_dd through grad_grad).
    y_pred, y_true, c, grad = ctx.saved_tensors
    gyp = gyt = gc = None
    if grad_value is not None:
        gyp = grad * grad_value if ctx.needs_input_grad[0] else None
        _, gyt, gc = _loss_grads(ctx, grad_value * ctx.scale, y_pred, y_true, c, ctx.path, skip_y_pred=True)
    if grad_grad is not None:
        more = _loss_grads(ctx, grad_grad * ctx.scale, y_pred, y_true, c, _join(ctx.path, "d"))
        gyp, gyt, gc = _add(gyp, more[0]), _add(gyt, more[1]), _add(gc, more[2])
    return gyp, gyt, gc, None, None


def _elements_grad(ctx, h):
    y_pred, y_true, c = ctx.saved_tensors
    return _loss_grads(ctx, h, y_pred, y_true, c, ctx.path) + (None, None)


loss.register_autograd(_loss_grad, setup_context=_loss_setup)
loss_elements.register_autograd(_elements_grad, setup_context=_save_inputs)
