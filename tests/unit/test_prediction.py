"""results/prediction.py: the one test of 'this run directory holds a prediction'."""

from __future__ import annotations

from tokenload.results.prediction import prediction_label, prediction_profile


def test_a_prediction_is_known_by_its_field_whatever_it_holds() -> None:
    assert prediction_label({"steps": []}) is None and prediction_profile({"steps": []}) is None
    assert prediction_label({"prediction": None}) is None
    plan = {
        "prediction": {"label": "prediction: tokenload sim --profile x in simulated time", "profile": "x"}
    }
    assert prediction_label(plan) == "tokenload sim --profile x in simulated time"  # said once
    assert prediction_profile(plan) == "x"
    assert prediction_label({"prediction": {}}) == "tokenload plan"  # a prediction, label or not
    assert prediction_label({"prediction": "by hand"}) == "by hand"
