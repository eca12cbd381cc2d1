"""hsnn's printed formulas and derivatives read back into SymPy as the same functions.

Every built-in (activations and losses) and every derivative hsnn prints
(``hsnn.diff``, and ``hsnn.parse(..., sympy=True)``) is handed to
``sympy.sympify`` with nothing but the variables defined, so every function in
the text must be one SymPy knows, and evaluated at many points; the values
must agree with hsnn's own (the interpreter, float64) to 1e-9 relative.
"""
import math

import pytest

import hsnn

sympy = pytest.importorskip("sympy", reason="SymPy (Debian's python3-sympy) is not installed")

FORMULAS = ["Piecewise((1, Eq(x, 0)), (x, True))", "Piecewise((x**2, Ne(x, 1) & (x > 0)), (x, True))",
            "Mod(x, 3)", "log2(x)", "log10(x)", "cbrt(x)", "Rational(1, 4)*x", "sin(x)*alpha", "x**3*sin(x)",
            "exp(-z**2/2)", "log(cosh(x))"]
POINTS = [-60.0, -7.5, -3.0, -1.5, -1.0, -0.3, 0.0, 0.2, 0.5, 1.0, 2.0, 3.5, 7.0, 30.0, 60.0]  # +-60: past the gelu guards
Y_TRUE = [0.0, 0.3, 1.0]


def _locals():
    v = sympy.Symbol("v")
    return v, {"num": v, "x": v, "z": v}


def _sympify(text, locals_):
    expr = sympy.sympify(text, locals=locals_)
    undefined = expr.atoms(sympy.core.function.AppliedUndef)
    assert not undefined, (text, undefined)  # a function SymPy does not know
    return expr


def _agree(got, want, text, at):
    if not math.isfinite(want):  # SymPy has zoo and nan where IEEE has inf and nan
        return
    assert got.imag == 0 and got.real == pytest.approx(want, rel=1e-9, abs=1e-12), (text, at)


def _check_activation(formula, constants, derivative):
    text = hsnn.diff(formula) if derivative else hsnn.parse(formula, sympy=True)["canonical"]
    v, locals_ = _locals()
    for name, value in constants.items():
        locals_[name] = sympy.Float(value)
    expr = _sympify(text, locals_)
    for at in POINTS:
        want = hsnn.eval(formula, at, constants=constants, derivative=derivative)
        _agree(complex(sympy.N(expr.subs(v, at), 30)), want, text, at)


@pytest.mark.parametrize("formula", FORMULAS)
def test_printed_text_is_sympy(formula):
    constants = {"alpha": 2.0} if "alpha" in formula else {}
    _check_activation(formula, constants, derivative=False)
    _check_activation(formula, constants, derivative=True)


@pytest.mark.parametrize("builtin", [b for b in hsnn.builtins()], ids=lambda b: b["name"])
def test_every_builtin_and_derivative_reads_back_in_sympy(builtin):
    if builtin["mode"] == "activation":
        _check_activation(builtin["name"], dict(builtin["params"]), derivative=False)
        _check_activation(builtin["name"], dict(builtin["params"]), derivative=True)
        return
    name = builtin["name"]
    yp_, yt_ = sympy.Symbol("yp"), sympy.Symbol("yt")
    _, locals_ = _locals()
    locals_.update({"y_pred": yp_, "y_true": yt_})
    for pname, value in builtin["params"].items():
        locals_[pname] = sympy.Float(value)
    for derivative in (False, True):
        text = hsnn.diff(name, mode="loss") if derivative else hsnn.parse(name, mode="loss", sympy=True)["canonical"]
        expr = _sympify(text, locals_)
        for yt in Y_TRUE:
            for at in ([0.05, 0.3, 0.7, 0.95] if name == "bce" else POINTS):
                want = hsnn.eval(name, at, y_true=yt, derivative=derivative)
                _agree(complex(sympy.N(expr.subs({yp_: at, yt_: yt}), 30)), want, text, (at, yt))


def test_sympy_spellings_on_request():
    # hsnn's own functions by default (they read back exactly), SymPy's terms for SymPy.
    assert hsnn.diff("softplus", sympy=False) == "sigmoid(num)"
    assert hsnn.diff("softplus") == "1/(1 + exp(-num))"
    assert hsnn.parse("softplus(x**2 - 1)")["canonical"] == "softplus(x**2 - 1)"
    assert hsnn.parse("softplus(x**2 - 1)", sympy=True)["canonical"] == "log(1 + exp(x**2 - 1))"
    assert hsnn.parse("sigmoid(-x)", sympy=True)["canonical"] == "1/(1 + exp(x))"
    assert hsnn.parse("log1p(x - 1)*expm1(x)**2", sympy=True)["canonical"] == "log(1 + (x - 1))*(exp(x) - 1)**2"
    assert hsnn.parse("2/sigmoid(x)", sympy=True)["canonical"] == "2/(1/(1 + exp(-x)))"


def test_guards_print_on_request():
    # The default text is gelu' on the reals; the kernels' tails branches on request.
    assert hsnn.diff("gelu") == "num*exp(-num**2/2)/sqrt(2*pi) + erfc(-num/sqrt(2))/2"
    assert hsnn.diff("gelu", guards=True).startswith("Piecewise((0, num <= -40), (1, num >= 40), ")
    assert hsnn.eval("gelu", math.inf, derivative=True) == 1.0
