"""A virtual sweep's step rates are the ones a run reports (summary.json's step fields, from the
client's records and the scraped /metrics), and they count the tokens that arrived in each
step's measured part, checked against the emulated engine's own token times (ground truth)."""

from __future__ import annotations

import pytest

from tokenload.sim.virtual_sweep import VirtualSchedule, VirtualWorkload, virtual_sweep

pytestmark = pytest.mark.simulated_time


@pytest.mark.parametrize(
    ("prompt", "output", "levels", "step_s"),
    [
        ("4096", "64", (1, 2, 4, 8), 10.0),  # long prefills, few requests a step
        ("256", "lognormal:mean=512,sigma=0.8", (4, 16, 64), 20.0),
        ("1024", "lognormal:mean=1024,sigma=1.0", (8, 32, 128), 15.0),  # most requests outlive a step
    ],
)
def test_step_output_rate_is_the_tokens_that_arrived_in_it(
    prompt: str, output: str, levels: tuple[int, ...], step_s: float
) -> None:
    vs = virtual_sweep(
        "a40-qwen2.5-7b",
        None,
        VirtualWorkload(prompt, output, seed=3),
        VirtualSchedule(concurrency=levels, step_duration_s=step_s, warmup=0.25),
    )
    completion_errors = []
    for step, w in zip(vs.steps, vs.windows, strict=True):
        a, b = w.measure_start, w.end
        done = [r for r in vs.requests if r.finished]
        arrived = sum(1 for r in done for t in r.token_times_s if a <= t < b) / (b - a)
        assert step["output_tokens_per_s"] == pytest.approx(arrived, rel=1e-9)
        # The server's counter (scraped at the window's edges here) counts every token the
        # engine generated, those of requests the drain bound cut too.
        server = step["server"]["generation_tokens"]["rate_per_s"]
        assert arrived <= server * (1 + 1e-9)
        ended = sum(r.num_output_tokens for r in done if a <= r.token_times_s[-1] < b) / (b - a)
        completion_errors.append(abs(ended / arrived - 1))
    # What the step reported before summary.json version 3 (all of a request's tokens in the
    # step it ended in): in a staircase that is a different number, most of all when requests
    # outlive the step.
    assert max(completion_errors) > 0.1


def test_a_rate_steps_arrivals_start_with_the_schedule_the_master_announces() -> None:
    """The master announces a rate step's schedule to start 50 ms after the step (t0 = now +
    0.05, loadgen/plugin.py); a virtual rate step draws its Poisson arrivals from there too, so
    a plan offers the step what a run's workers send."""
    vs = virtual_sweep(
        "h100-llama3.1-8b",
        None,
        VirtualWorkload("128", "16", seed=5),
        VirtualSchedule(rates=(40.0, 80.0), step_duration_s=5.0, warmup=0.2),
    )
    for w in vs.windows:
        sent = [r.arrival_s for r in vs.requests if w.start <= r.arrival_s < w.end]
        assert len(sent) > 50
        assert min(sent) >= w.start + 0.05
