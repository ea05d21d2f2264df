"""The calibration's search methods on functions whose minimum is known."""

from __future__ import annotations

import math

import pytest

from tokenload.sim.minimize import golden_section, nelder_mead


def test_golden_section_finds_a_minimum_inside_its_interval() -> None:
    x, fx, evals = golden_section(
        lambda x: (x - math.log(0.004)) ** 2 + 1.0, math.log(1e-5), math.log(0.05), 1e-3
    )
    assert math.exp(x) == pytest.approx(0.004, rel=2e-3)
    assert fx == pytest.approx(1.0, abs=1e-6)
    assert evals <= 40


def test_golden_section_at_an_edge_returns_the_edge() -> None:
    x, _, _ = golden_section(lambda x: x, 0.0, 1.0, 1e-4)
    assert x == pytest.approx(0.0, abs=1e-3)


def test_nelder_mead_finds_a_quadratics_minimum() -> None:
    x, fx, _ = nelder_mead(lambda u: (u[0] - 1) ** 2 + 10 * (u[1] + 2) ** 2, [0.0, 0.0], max_evals=400)
    assert x == pytest.approx([1.0, -2.0], abs=1e-3)
    assert fx == pytest.approx(0.0, abs=1e-6)
