"""Seeded fault injection for the emulator: which request misbehaves, and how. Pure."""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["FaultConfig", "FaultPlan"]


@dataclass(frozen=True, slots=True)
class FaultConfig:
    """Rates are per request, in [0, 1]; at most one fault is drawn for a request."""

    http_500_rate: float = 0.0
    http_429_rate: float = 0.0
    retry_after_s: int = 1
    disconnect_rate: float = 0.0
    disconnect_after_tokens: int = 8
    malformed_rate: float = 0.0
    error_event_rate: float = 0.0
    stall_rate: float = 0.0
    stall_s: float = 5.0
    #: Mid-stream faults fire after this many tokens were sent.
    fault_after_tokens: int = 8
    #: /health answers 503 (and generation 503) this long after start: a slow model load.
    startup_delay_s: float = 0.0
    #: A slow helper endpoint: every POST /tokenize answers this much later (an API process busy
    #: with other requests' tokenization and framing), and this share of them answers HTTP 503.
    tokenize_delay_s: float = 0.0
    tokenize_error_rate: float = 0.0
    seed: int = 0

    def validate(self) -> None:
        total = 0.0
        for name in (
            "http_500_rate",
            "http_429_rate",
            "disconnect_rate",
            "malformed_rate",
            "error_event_rate",
            "stall_rate",
        ):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"--{name.replace('_', '-')}: expected a rate in [0, 1], got {v}")
            total += v
        if total > 1.0:
            raise ValueError(f"fault rates add up to {total:g}; expected at most 1")
        if self.stall_s < 0 or self.startup_delay_s < 0 or self.tokenize_delay_s < 0:
            raise ValueError(
                "--stall-s/--startup-delay-s/--tokenize-delay-s: expected a non-negative number of seconds"
            )
        if not 0.0 <= self.tokenize_error_rate <= 1.0:
            rate = self.tokenize_error_rate
            raise ValueError(f"--tokenize-error-rate: expected a rate in [0, 1], got {rate}")

    @property
    def any(self) -> bool:
        return any(
            (
                self.http_500_rate,
                self.http_429_rate,
                self.disconnect_rate,
                self.malformed_rate,
                self.error_event_rate,
                self.stall_rate,
            )
        )


class FaultPlan:
    """Draws one fault (or none) per request from a seeded stream: reproducible runs."""

    def __init__(self, cfg: FaultConfig) -> None:
        self.cfg = cfg
        self._rng = random.Random(cfg.seed)
        self._tok_rng = random.Random(f"{cfg.seed}:tokenize")
        self._table = [
            ("http_500", cfg.http_500_rate),
            ("http_429", cfg.http_429_rate),
            ("disconnect", cfg.disconnect_rate),
            ("malformed", cfg.malformed_rate),
            ("error_event", cfg.error_event_rate),
            ("stall", cfg.stall_rate),
        ]

    def draw_tokenize_error(self) -> bool:
        """Whether this /tokenize call fails (its own stream: generation faults do not shift)."""
        return self.cfg.tokenize_error_rate > 0 and self._tok_rng.random() < self.cfg.tokenize_error_rate

    def draw(self) -> str | None:
        if not self.cfg.any:
            return None
        x = self._rng.random()
        for name, rate in self._table:
            if x < rate:
                return name
            x -= rate
        return None
