#!/usr/bin/python3
"""Derives the polynomial coefficients of hsnn's math library (lib/CodeGen/Math*.cpp).

Each fit is near-minimax in relative error: a weighted least-squares fit on
Chebyshev points, reweighted by Lawson's rule, in 60-digit arithmetic with
mpmath; the coefficients are then rounded to the target type and the error
of the rounded polynomial is measured on a dense grid. Prints C++ arrays.

  /usr/bin/python3 tools/math-coefficients.py [name ...]
"""
import struct
import sys

import mpmath as mp

mp.mp.dps = 60


def fit(target, lo, hi, degree, points=400, iterations=30, basis=None, scale=None):
    """Coefficients c_k (lowest first) of sum c_k basis(u)^k ~ target(u) on [lo, hi],
    minimizing max |(poly - target)/scale| (scale: target itself unless given)."""
    us = [lo + (hi - lo) * (1 - mp.cos(mp.pi * (i + mp.mpf(0.5)) / points)) / 2 for i in range(points)]
    ys = [target(u) for u in us]
    ss = ys if scale is None else [scale(u) for u in us]
    w = [mp.mpf(1)] * points
    coef = None
    for _ in range(iterations):
        rows = [[(u if basis is None else basis(u)) ** k * mp.sqrt(w[i]) / ss[i] for k in range(degree + 1)]
                for i, u in enumerate(us)]
        rhs = [ys[i] * mp.sqrt(w[i]) / ss[i] for i in range(points)]
        a = mp.matrix(rows)
        coef = mp.lu_solve(a.T * a, a.T * mp.matrix(rhs))
        err = [abs(sum(coef[k] * (u if basis is None else basis(u)) ** k for k in range(degree + 1)) - ys[i]) / abs(ss[i])
               for i, u in enumerate(us)]
        total = sum(w[i] * err[i] for i in range(points))
        w = [w[i] * err[i] / total for i in range(points)]
    return [coef[k] for k in range(degree + 1)]


def rounded(coef, dtype):
    return [mp.mpf(float(c)) if dtype == 'f64' else mp.mpf(float(mp.mpf(f'{float(c):.9g}'))) for c in coef]


def hexfloat(v, dtype):
    if dtype == 'f32':
        v = struct.unpack('f', struct.pack('f', float(v)))[0]
    mantissa, exponent = float(v).hex().split('p')
    mantissa = mantissa.rstrip('0').rstrip('.')
    return f'{mantissa}p{exponent}' + ('f' if dtype == 'f32' else '')


def report(name, coef, dtype, check, what='relative error'):
    worst = max(check(rounded(coef, dtype)))
    body = ', '.join(hexfloat(c, dtype) for c in rounded(coef, dtype))
    ctype = 'float' if dtype == 'f32' else 'double'
    print(f'// {name}: {what} {mp.nstr(worst, 3)} (2^{mp.nstr(mp.log(worst, 2), 4)}) with the rounded coefficients')
    print(f'constexpr {ctype} k{name}[] = {{{body}}};')


def dense(lo, hi, n=3000):
    return [lo + (hi - lo) * i / (n - 1) for i in range(n)]


def poly(coef, u):
    acc = mp.mpf(0)
    for c in reversed(coef):
        acc = acc * u + c
    return acc


# ---- the fits ----

def atan_fit(dtype, degree):
    # atan(x) = x + x^3 P(x^2), x in [0, tan(pi/8)]: P fitted in z = x^2.
    zmax = (mp.sqrt(2) - 1) ** 2
    target = lambda z: (mp.atan(mp.sqrt(z)) - mp.sqrt(z)) / mp.sqrt(z) ** 3 if z > 0 else mp.mpf(-1) / 3
    coef = fit(target, mp.mpf(0), zmax, degree)

    def check(c):
        out = []
        for z in dense(mp.mpf(10) ** -30, zmax):
            x = mp.sqrt(z)
            out.append(abs((x + x ** 3 * poly(c, z)) / mp.atan(x) - 1))
        return out
    report(f'Atan{dtype.upper()}', coef, dtype, check)


def sin_fit(dtype, degree):
    # sin(r) = r + r^3 S(r^2), r in [-pi/4, pi/4].
    zmax = (mp.pi / 4) ** 2
    target = lambda z: (mp.sin(mp.sqrt(z)) - mp.sqrt(z)) / mp.sqrt(z) ** 3 if z > 0 else mp.mpf(-1) / 6
    coef = fit(target, mp.mpf(0), zmax, degree)

    def check(c):
        return [abs((mp.sqrt(z) + mp.sqrt(z) ** 3 * poly(c, z)) / mp.sin(mp.sqrt(z)) - 1)
                for z in dense(mp.mpf(10) ** -30, zmax)]
    report(f'Sin{dtype.upper()}', coef, dtype, check)


def cos_fit(dtype, degree):
    # cos(r) = 1 - r^2/2 + r^4 C(r^2), r in [-pi/4, pi/4].
    zmax = (mp.pi / 4) ** 2
    target = lambda z: (mp.cos(mp.sqrt(z)) - 1 + z / 2) / z ** 2 if z > 0 else mp.mpf(1) / 24
    coef = fit(target, mp.mpf(0), zmax, degree)

    def check(c):
        return [abs((1 - z / 2 + z ** 2 * poly(c, z)) / mp.cos(mp.sqrt(z)) - 1) for z in dense(mp.mpf(0), zmax)]
    report(f'Cos{dtype.upper()}', coef, dtype, check)


def erf_fit(dtype, degree, xmax):
    # erf(x) = x + x F(x^2) for |x| <= xmax: E = erf(x)/x fitted in z = x^2
    # for relative error, then F = E - 1 (its constant term 2/sqrt(pi) - 1
    # keeps three more bits than E's).
    target = lambda z: mp.erf(mp.sqrt(z)) / mp.sqrt(z) if z > 0 else 2 / mp.sqrt(mp.pi)
    coef = fit(target, mp.mpf(0), mp.mpf(xmax) ** 2, degree)
    coef[0] -= 1

    def check(c):
        return [abs((1 + poly(c, z)) * mp.sqrt(z) / mp.erf(mp.sqrt(z)) - 1)
                for z in dense(mp.mpf(10) ** -30, mp.mpf(xmax) ** 2)]
    report(f'Erf{dtype.upper()}', coef, dtype, check)


def erf_tail_fit(dtype, degree, lo, hi, center):
    # erf(a) = 1 - exp(T(a)) for a in [lo, hi]: T ~ log(erfc(a)) in u = a - center,
    # weighted by erfc(a) (an error d in T moves erf by d erfc(a)).
    lo, hi, center = mp.mpf(lo), mp.mpf(hi), mp.mpf(center)
    coef = fit(lambda u: mp.log(mp.erfc(u + center)), lo - center, hi - center, degree,
               scale=lambda u: 1 / mp.erfc(u + center))

    def check(c):
        return [abs(poly(c, u) - mp.log(mp.erfc(u + center))) * mp.erfc(u + center) for u in dense(lo - center, hi - center)]
    report(f'ErfTail{dtype.upper()}', coef, dtype, check, 'error in erf')


def erfc_fit(dtype, degree, amax):
    # R(a) = (1 + 2a) exp(a^2) erfc(a) = 1 + t1 P(t1 - 1), t1 = 2a/(a + 2).
    tmax = 2 * mp.mpf(amax) / (amax + 2)
    a_of = lambda t1: 2 * t1 / (2 - t1)
    R = lambda a: (1 + 2 * a) * mp.exp(a * a) * mp.erfc(a)
    target = lambda t: (R(a_of(t + 1)) - 1) / (t + 1) if t > -1 else (mp.mpf(2) - 2 / mp.sqrt(mp.pi)) * 1  # dR/dt1 at 0
    # at t1 = 0: (R - 1)/t1 -> dR/da * da/dt1 = (2 - 2/sqrt(pi)) * 1
    coef = fit(target, mp.mpf(-1), tmax - 1, degree)

    def check(c):
        out = []
        for t in dense(mp.mpf(-1) + mp.mpf(10) ** -20, tmax - 1):
            out.append(abs((1 + (t + 1) * poly(c, t)) / R(a_of(t + 1)) - 1))
        return out
    report(f'Erfc{dtype.upper()}', coef, dtype, check)


def erf_table(function='erf', amax=6, steps_per_unit=128):
    # erf's and erfc's tables (MathErf.cpp): for r = i/128, i = 0..128 amax,
    # the function at r as hi + lo and erf'(r) = 2/sqrt(pi) exp(-r^2), each
    # rounded to double once. The whole of lib/CodeGen/MathErfTable.inc
    # (erftable64) and MathErfcTable.inc (erfctable64):
    #   tools/math-coefficients.py erftable64 > lib/CodeGen/MathErfTable.inc
    f = mp.erf if function == 'erf' else mp.erfc
    print(f'// Generated by tools/math-coefficients.py {function}table64: do not edit.')
    print(f'// {function}(i/{steps_per_unit}) as hi + lo and 2/sqrt(pi) exp(-(i/{steps_per_unit})^2), '
          f'i = 0..{steps_per_unit * amax}.')
    for i in range(steps_per_unit * amax + 1):
        r = mp.mpf(i) / steps_per_unit
        e = f(r)
        hi = mp.mpf(float(e))
        lo = float(e - hi)
        d = float(2 / mp.sqrt(mp.pi) * mp.exp(-r * r))
        print(f'{hexfloat(hi, "f64")}, {hexfloat(lo, "f64")}, {hexfloat(d, "f64")},')


def exp_fit(degree):
    # exp's polynomial for doubles (InlineMath.cpp): exp(r) = 1 + r P(r) and
    # expm1(r) = r + r^2 Q(r), P = 1 + r Q, for |r| <= ln2/2; Q fitted for
    # relative error, so that expm1's shifted use of P keeps it.
    h = mp.log(2) / 2
    q = lambda r: (mp.expm1(r) - r) / (r * r) if r != 0 else mp.mpf(0.5)
    coef = fit(q, -h, h, degree, points=200, iterations=20)

    def check(rc):
        return [abs(poly(rc, u) - q(u)) / q(u) for u in dense(-h, h) if u != 0]
    report('ExpQ64', coef, 'f64', check)
    print('// kExpP64 = {1.0, kExpQ64...}')


def pio2_short(dtype, k_bits, name=None):
    # pi/2 in three parts for sin/cos (MathTrig.cpp, reduceShort): the first
    # rounded to the type, the second cut to (type's bits - k_bits) bits so
    # that k times it is exact for |k| < 2^k_bits, the third rounded.
    bits = 24 if dtype == 'f32' else 53

    def rnd(v):
        return mp.mpf(struct.unpack('f', struct.pack('f', float(v)))[0]) if dtype == 'f32' else mp.mpf(float(v))
    h = mp.pi / 2
    p0 = rnd(h)
    e = mp.floor(mp.log(abs(h - p0), 2))
    step = mp.mpf(2) ** (e - (bits - k_bits) + 1)
    p1 = mp.nint((h - p0) / step) * step
    p2 = rnd(h - p0 - p1)
    rest = h - p0 - p1 - p2
    ctype = 'float' if dtype == 'f32' else 'double'
    print(f'// pi/2 = p0 + p1 + p2 + 2^{mp.nstr(mp.log(abs(rest), 2), 4)}, p1 of {bits - k_bits} bits')
    name = name or ('kPio2Short32' if dtype == 'f32' else 'kPio2Short64')
    print(f'constexpr {ctype} {name}[] = {{{", ".join(hexfloat(v, dtype) for v in (p0, p1, p2))}}};')


FITS = {
    'atan64': lambda: atan_fit('f64', 11),
    'atan32': lambda: atan_fit('f32', 4),
    'sin64': lambda: sin_fit('f64', 6),
    'cos64': lambda: cos_fit('f64', 6),
    'sin32': lambda: sin_fit('f32', 3),
    'cos32': lambda: cos_fit('f32', 3),
    'erf32': lambda: erf_fit('f32', 6, 0.875),
    'erfc64': lambda: erfc_fit('f64', 27, 27.3),
    'erftail32': lambda: erf_tail_fit('f32', 6, 0.875, 4, 0.875),
    'erftable64': lambda: erf_table('erf', 6),
    'erfctable64': lambda: erf_table('erfc', 5),
    'expq64': lambda: exp_fit(10),
    'pio2f32': lambda: pio2_short('f32', 14),
    'pio2f64': lambda: pio2_short('f64', 19),
    'pio2f32medium': lambda: pio2_short('f32', 0, 'kPio2Medium32'),
}

if __name__ == '__main__':
    for name in sys.argv[1:] or FITS:
        FITS[name]()
