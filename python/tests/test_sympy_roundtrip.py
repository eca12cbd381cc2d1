"""hsnn's printed formulas read back into SymPy as the same function."""
import math

import pytest

import hsnn

sympy = pytest.importorskip("sympy", reason="SymPy (Debian's python3-sympy) is not installed")

FORMULAS = ["Piecewise((1, Eq(x, 0)), (x, True))", "Piecewise((x**2, Ne(x, 1) & (x > 0)), (x, True))",
            "Mod(x, 3)", "log2(x)", "log10(x)", "cbrt(x)", "Rational(1, 4)*x", "sin(x)*alpha", "relu", "gelu",
            "softsign", "tanh"]
POINTS = [0.0, 0.5, 1.0, 2.0, 3.5, 7.0]


@pytest.mark.parametrize("formula", FORMULAS)
def test_printed_text_is_sympy(formula):
    constants = {"alpha": 2.0} if "alpha" in formula else {}
    text = hsnn.parse(formula)["canonical"]
    num = sympy.Symbol("num")
    locals_ = {"num": num, "alpha": sympy.Float(2.0), "sigmoid": lambda u: 1 / (1 + sympy.exp(-u)),
               "softplus": lambda u: sympy.log(1 + sympy.exp(u)), "erfc": sympy.erfc}
    expr = sympy.sympify(text, locals=locals_)
    for at in POINTS:
        want = hsnn.eval(formula, at, constants=constants)
        got = complex(expr.subs(num, at).evalf())
        if not math.isfinite(want):  # SymPy has zoo and nan where IEEE has inf and nan
            continue
        assert got.imag == 0 and got.real == pytest.approx(want, rel=1e-12, abs=1e-12), (text, at)
