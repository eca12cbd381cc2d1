"""hsnn.torch's derivative rules, written once for the two ways the kernels
reach autograd: the eager modules' autograd functions (hsnn/torch.py) and
the custom operators that torch.compile traces (hsnn/_torch_ops.py).

A rule takes the saved inputs, the incoming gradients, a node and an
``ops`` object. The node names a kernel and leads to the ones its
derivatives need: an activation node's ``d`` (the formulas differentiated in
num) and ``t`` (their constants' tangent); a loss node's ``d`` (d/dy_pred),
``dt`` (d/dy_true), ``c(name)`` (d/d constant) and ``names`` (its
constants). The eager functions' nodes are the compiled layers and losses;
the operators' are a module key and a path of steps. The ops run the
kernels at a node:

  apply(z, c, node)                  f(z; c)
  backward(z, c, err, node)          err * f'(z; c)
  constant_gradient(z, c, err, node) the sum over the batch of err * df/dc
  pack(z, c, h, tangent)             a tangent layer's params from c and a direction h
  constant_part(z, c, g, tangent)    the entries of a tangent's constant gradient that are c's
  elements(y_pred, y_true, c, node)  the loss per element
  times(h, x)                        h * x, x a kernel's output

differentiable again (each an autograd function, or an operator) or, for a
backward that builds no graph, the kernels themselves.
"""
import torch


def _add(a, b):
    return b if a is None else a if b is None else a + b


def _scaled(h, scale):
    # A scale of 1 (sum, none) is no product: h * 1 is h, bit for bit.
    return h if scale == 1.0 else h * scale


def reduction_scale(reduction, y_pred):
    """The reduced loss is scale * the sum of its elements."""
    return 1.0 / y_pred.numel() if reduction == "mean" and y_pred.numel() else 1.0


# --- activations ------------------------------------------------------------

def activation_grads(ops, z, c, node, grad_a, grad_d, needs, dfdz=None):
    """(in z, in c) of a = f(z; c) and, where the forward gives it as an
    output (the operator does), d = f'(z; c): grad_a * f' and grad_d * f'';
    the constant gradients of both. dfdz is the forward's f' where the
    caller can use it (at first order; as the operator's output, itself
    differentiable), else the backward kernel gives grad_a * f'."""
    gz = gc = None
    if needs[0]:
        if grad_a is not None:
            gz = ops.times(grad_a, dfdz) if dfdz is not None else ops.backward(z, c, grad_a, node)
        if grad_d is not None:
            gz = _add(gz, ops.backward(z, c, grad_d, node.d))
    if needs[1]:
        if grad_a is not None:
            gc = ops.constant_gradient(z, c, grad_a, node)
        if grad_d is not None:
            gc = _add(gc, ops.constant_gradient(z, c, grad_d, node.d))
    return gz, gc


def backward_grads(ops, z, c, err, node, h, needs):
    """(in z, in c, in err) of delta = err * f'(z; c) along h: err * h * f'';
    the sum of err * h * df'/dc; h * f'."""
    gz = gc = gerr = None
    if needs[0] or needs[1]:
        eh = err * h
        if needs[0]:
            gz = ops.backward(z, c, eh, node.d)
        if needs[1]:
            gc = ops.constant_gradient(z, c, eh, node.d)
    if needs[2]:
        gerr = ops.backward(z, c, h, node)
    return gz, gc, gerr


def constant_gradient_grads(ops, z, c, err, node, h, needs):
    """(in z, in c, in err) of g = the sum of err * df/dc, along a direction h
    over the constants: the tangent layer's formulas sum_i h_i * df/dc_i
    give them, its backward in z, its own constant gradient in c (the
    constants' part), its forward in err."""
    tangent = node.t
    packed = ops.pack(z, c, h, tangent)
    gz = gc = gerr = None
    if needs[2]:
        gerr = ops.apply(z, packed, tangent)
    if needs[0]:
        gz = ops.backward(z, packed, err, tangent)
    if needs[1]:
        gc = ops.constant_part(z, c, ops.constant_gradient(z, packed, err, tangent), tangent)
    return gz, gc, gerr


# --- losses -----------------------------------------------------------------

def by_constants(ops, h, y_pred, y_true, c, node):
    """The sum over the elements of h * dl/dc, one entry per constant."""
    names = node.names
    if not names:
        return c.new_zeros(0)
    return torch.stack([ops.times(h, ops.elements(y_pred, y_true, c, node.c(name))).sum()
                        for name in names]).to(c.dtype)


def elements_grads(ops, h, y_pred, y_true, c, node, needs):
    """(in y_pred, in y_true, in c) of the loss per element, along h."""
    gyp = gyt = gc = None
    if needs[0]:
        gyp = ops.times(h, ops.elements(y_pred, y_true, c, node.d))
    if needs[1]:
        gyt = ops.times(h, ops.elements(y_pred, y_true, c, node.dt))
    if needs[2]:
        gc = by_constants(ops, h, y_pred, y_true, c, node)
    return gyp, gyt, gc


def value_grads(ops, y_pred, y_true, c, node, scale, grad_value, grad_grad, needs, fused=None, constants=None):
    """(in y_pred, in y_true, in c) of value = scale * the sum of the loss's
    elements (scale 1 and no sum for reduction none) and, where the forward
    gives it as an output (the operator does), grad = scale * dl/dy_pred.

    What the forward's kernels gave, where the caller can use it (at first
    order; as the operator's output, itself differentiable): fused, scale *
    dl/dy_pred per element; constants, scale * the sum of dl/dc (the loss's
    constant-gradient kernel). Without them the derivative losses' elements
    give both."""
    gyp = gyt = gc = None
    if grad_value is not None:
        from_elements = (needs[0] and fused is None, needs[1], needs[2] and constants is None)
        if any(from_elements):
            gyp, gyt, gc = elements_grads(ops, _scaled(grad_value, scale), y_pred, y_true, c, node, from_elements)
        if needs[0] and fused is not None:
            gyp = ops.times(grad_value, fused)
        if needs[2] and constants is not None:
            gc = ops.times(grad_value, constants).to(c.dtype)
    if grad_grad is not None:
        more = elements_grads(ops, _scaled(grad_grad, scale), y_pred, y_true, c, node.d, needs)
        gyp, gyt, gc = _add(gyp, more[0]), _add(gyt, more[1]), _add(gc, more[2])
    return gyp, gyt, gc
