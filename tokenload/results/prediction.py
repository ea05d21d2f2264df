"""Whether a run directory holds a prediction: ``summary.json``'s ``prediction`` field, which
``tokenload plan --out`` writes (a dict with ``label``, ``profile``, ``engine``, ``workload``)
and a measured run never has. One definition for everything that reads a run (report, compare,
calibrate), so a prediction is never shown, compared or fitted as if it were measured. Pure.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DEFAULT_LABEL", "prediction_label", "prediction_profile"]

#: What a prediction is called when its ``label`` is missing.
DEFAULT_LABEL = "tokenload plan"


def prediction_label(summary: dict[str, Any]) -> str | None:
    """What predicted the run (``prediction.label`` without its ``prediction:`` prefix), or None
    for a measured run."""
    pred = summary.get("prediction")
    if pred is None or pred == "":
        return None
    label = pred.get("label") if isinstance(pred, dict) else str(pred)
    return str(label or DEFAULT_LABEL).removeprefix("prediction: ")


def prediction_profile(summary: dict[str, Any]) -> str | None:
    """The emulator profile a prediction came from (None: a measured run, or not recorded)."""
    pred = summary.get("prediction")
    return str(pred["profile"]) if isinstance(pred, dict) and pred.get("profile") else None
