"""LogHistogram: the relative-error bound, exact counts, merging and serialisation."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenload.metrics.histogram import LogHistogram


def exact_quantile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[max(1, math.ceil(q * len(s))) - 1]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(min_value=0.01, max_value=1e6, allow_nan=False), min_size=1, max_size=300),
    st.sampled_from([0.0, 0.5, 0.9, 0.99, 1.0]),
)
def test_quantiles_within_relative_error(values: list[float], q: float) -> None:
    h = LogHistogram(0.01)
    for v in values:
        h.add(v)
    assert h.count == len(values)
    assert h.sum == pytest.approx(sum(values))
    truth = exact_quantile(values, q)
    assert abs(h.quantile(q) - truth) <= 0.01 * truth + 1e-12


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.floats(min_value=0, max_value=1e5), max_size=100),
    st.lists(st.floats(min_value=0, max_value=1e5), max_size=100),
)
def test_merge_equals_adding_everything(a: list[float], b: list[float]) -> None:
    ha, hb, hall = LogHistogram(), LogHistogram(), LogHistogram()
    for v in a:
        ha.add(v)
        hall.add(v)
    for v in b:
        hb.add(v)
        hall.add(v)
    merged = LogHistogram.from_dict(ha.to_dict())
    merged.merge(LogHistogram.from_dict(hb.to_dict()))
    assert merged.count == hall.count
    assert merged.buckets == hall.buckets
    assert merged.zero_count == hall.zero_count
    for q in (0.5, 0.99):
        assert merged.quantile(q) == hall.quantile(q)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.floats(min_value=0, max_value=1e5), st.integers(1, 5)), max_size=100),
    st.lists(st.floats(min_value=0, max_value=1e5), max_size=20),
)
def test_add_pairs_equals_adding_one_by_one(pairs: list[tuple[float, int]], before: list[float]) -> None:
    one, many = LogHistogram(), LogHistogram()
    for v in before:  # on top of what a histogram already holds
        one.add(v)
        many.add(v)
    for v, n in pairs:
        one.add(v, n)
    many.add_pairs(pairs)
    assert many.to_dict() == one.to_dict()
    assert (many.min, many.max) == (one.min, one.max)
    with pytest.raises(ValueError):
        many.add_pairs([(1.0, 1), (float("nan"), 1)])


def test_weighted_add_and_zero_values() -> None:
    h = LogHistogram()
    h.add(0.0, 3)
    h.add(10.0, 7)
    assert h.count == 10
    assert h.quantile(0.3) == 0.0
    assert h.quantile(0.31) == pytest.approx(10.0, rel=0.01)
    assert h.mean == pytest.approx(7.0)


def test_rejects_negative_and_nan() -> None:
    h = LogHistogram()
    with pytest.raises(ValueError):
        h.add(-1.0)
    with pytest.raises(ValueError):
        h.add(float("nan"))


def test_empty_and_mismatched_merge() -> None:
    assert LogHistogram().quantile(0.5) is None
    with pytest.raises(ValueError):
        LogHistogram(0.01).merge(LogHistogram(0.02))
