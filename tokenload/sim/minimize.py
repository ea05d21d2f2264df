"""Derivative-free minimisers for the calibration's fits (pure; numpy only for the
least-squares polish): a simplex for the start, a damped Gauss-Newton to walk down a narrow
valley, and a golden-section search for one parameter."""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["golden_section", "levenberg_marquardt", "nelder_mead"]


def nelder_mead(
    f: Callable[[list[float]], float],
    x0: list[float],
    step: float = 0.5,
    max_evals: int = 400,
    tol: float = 1e-12,
) -> tuple[list[float], float, int]:
    """Minimise ``f`` from ``x0`` (the standard simplex method: reflect, expand, contract,
    shrink). Returns the best point, its value and the number of evaluations."""
    n = len(x0)
    simplex = [list(x0)] + [[x + (step if i == j else 0.0) for j, x in enumerate(x0)] for i in range(n)]
    values = [f(x) for x in simplex]
    evals = n + 1
    while evals < max_evals:
        order = sorted(range(n + 1), key=values.__getitem__)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        if values[-1] - values[0] <= tol * (abs(values[0]) + tol):
            break
        centroid = [sum(p[j] for p in simplex[:-1]) / n for j in range(n)]
        worst = simplex[-1]

        def toward(t: float, worst: list[float] = worst, centroid: list[float] = centroid) -> list[float]:
            return [c + t * (w - c) for c, w in zip(centroid, worst, strict=True)]

        xr = toward(-1.0)
        fr = f(xr)
        evals += 1
        if fr < values[0]:
            xe = toward(-2.0)
            fe = f(xe)
            evals += 1
            simplex[-1], values[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = xr, fr
        else:
            xc = toward(0.5 if fr >= values[-1] else -0.5)
            fc = f(xc)
            evals += 1
            if fc < min(fr, values[-1]):
                simplex[-1], values[-1] = xc, fc
            else:  # shrink toward the best
                best = simplex[0]
                for i in range(1, n + 1):
                    simplex[i] = [b + 0.5 * (x - b) for b, x in zip(best, simplex[i], strict=True)]
                    values[i] = f(simplex[i])
                evals += n
    i = min(range(n + 1), key=values.__getitem__)
    return simplex[i], values[i], evals


def levenberg_marquardt(
    residuals: Callable[[list[float]], list[float]],
    x0: list[float],
    iterations: int = 40,
    h: float = 1e-5,
) -> tuple[list[float], float, int]:
    """Polish a least-squares minimum from ``x0`` (damped Gauss-Newton, forward-difference
    Jacobian): where Nelder-Mead crawls along a narrow valley, this walks down it. Returns the
    point, its sum of squares and the number of evaluations."""
    import numpy as np

    x = np.array(x0, dtype=float)
    r = np.array(residuals(list(x)))
    cost, evals, lam = float(r @ r), 1, 1e-3
    for _ in range(iterations):
        jac = np.empty((len(r), len(x)))
        for j in range(len(x)):
            xj = x.copy()
            xj[j] += h
            jac[:, j] = (np.array(residuals(list(xj))) - r) / h
        evals += len(x)
        jtj, jtr = jac.T @ jac, jac.T @ r
        improved = False
        while lam < 1e12:
            step = np.linalg.solve(jtj + lam * np.diag(np.diag(jtj) + 1e-12), -jtr)
            r_new = np.array(residuals(list(x + step)))
            evals += 1
            c_new = float(r_new @ r_new)
            if c_new < cost:
                x, r, lam, improved = x + step, r_new, max(lam / 10, 1e-12), True
                converged = cost - c_new <= 1e-15 * max(cost, 1e-30)
                cost = c_new
                break
            lam *= 10
        if not improved or converged or cost < 1e-24:
            break
    return list(x), cost, evals


def golden_section(
    f: Callable[[float], float], low: float, high: float, tol: float = 1e-3, max_evals: int = 40
) -> tuple[float, float, int]:
    """Minimise ``f`` on ``[low, high]`` (unimodal there) by golden-section search: the interval
    shrinks by 0.618 an evaluation until narrower than ``tol``. Returns the best point seen, its
    value and the number of evaluations."""
    inv = (math.sqrt(5) - 1) / 2
    a, b = low, high
    c, d = b - inv * (b - a), a + inv * (b - a)
    fc, fd = f(c), f(d)
    evals = 2
    while b - a > tol and evals < max_evals:
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - inv * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + inv * (b - a)
            fd = f(d)
        evals += 1
    return (c, fc, evals) if fc <= fd else (d, fd, evals)
