"""Fit an emulator profile to measured steps: the cost model's unknowns, within physical bounds.

What a run shows (per step: its load, the prompt and output lengths its requests had, TTFT p50,
TPOT p50, output tokens/s) is compared with what the emulator predicts for the same load under a
candidate profile; a Nelder-Mead search in bounded coordinates minimises the squared relative
errors. The known facts stay as they are: the GPU's datasheet peaks, the model's shape, the
engine's settings (chunk size, caps). Only :data:`PARAMETERS` are fitted.

What each kind of step pins down (see the cost model, :mod:`tokenload.sim.costmodel`):

* a single user at several prompt lengths (a context sweep at concurrency 1): TTFT's slope in
  the prompt length gives the matmul efficiency, its curvature the attention efficiency; TPOT
  at long contexts gives the KV-read bandwidth; short prompts (memory-bound prefill) against
  long ones (compute-bound) separate the compute/memory overlap, the weight-streaming bandwidth
  and the fixed per-step overhead;
* a staircase (concurrency > 1) checks them where batches form: decode batches, prefill chunks
  mixed with decodes; its steps are predicted by a closed loop of the step's users in simulated
  time. By default it is checked, not fitted: such a replay reproduces a step's TPOT p50 only to
  1-2 % with the true profile (the users' requests line up differently than in the run), and
  fitting to that pulls the per-step overhead along its valley with the weight-streaming
  bandwidth by up to 70 % (measured, seed 5 of bench/twin_sim.py). ``fit_batched=True`` fits it
  too, for a server whose batches the single-user figures do not predict;
* a staircase that loads the API server (short requests, many users) pins its cost per request
  (``fit_api``): the request rate it caps the steps at (bench/twin_api.py).

Pure: no I/O (the CLI reads run directories, :mod:`tokenload.calibrate_cli`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tokenload.sim.engine import EngineConfig
from tokenload.sim.minimize import golden_section, levenberg_marquardt, nelder_mead
from tokenload.sim.profile import Profile
from tokenload.sim.replay import Observation, Prediction, predict

__all__ = [
    "ALL_PARAMETERS",
    "API_FLOOR_S",
    "API_PARAMETERS",
    "FIGURE_NOISE",
    "FRONTEND_PARAMETERS",
    "FRONTEND_START",
    "PARAMETERS",
    "THROUGHPUT_NOISE",
    "UNDETERMINED",
    "Fit",
    "Observation",
    "Parameter",
    "decode_fixed_s",
    "fit_errors",
    "fit_profile",
    "fit_residuals",
    "from_unit",
    "levenberg_marquardt",
    "nelder_mead",
    "perturbed_values",
    "pinned_figures",
    "predict",
    "to_unit",
    "uncertainty",
    "values_of",
    "with_values",
]


@dataclass(frozen=True, slots=True)
class Parameter:
    """One fitted unknown: where it lives in the profile and its physical bounds (with why)."""

    name: str
    low: float
    high: float
    why: str


#: The unknowns, with bounds from what published kernels reach (the search never leaves them).
PARAMETERS: tuple[Parameter, ...] = (
    Parameter("prefill_matmul", 0.2, 0.95, "dense GEMMs reach 60-90 % of the datasheet peak"),
    Parameter("attention", 0.03, 0.8, "FlashAttention-2/3 forward: 35-75 % of peak on long sequences"),
    Parameter("decode_bandwidth", 0.3, 0.95, "weight streaming reaches 70-92 % of peak HBM bandwidth"),
    Parameter("kv_read", 0.1, 0.95, "paged-attention decode: 20-90 % of peak bandwidth by occupancy"),
    Parameter("compute_memory_overlap", 0.0, 1.0, "0 = compute and memory time add, 1 = ideal roofline"),
    Parameter("step_overhead_s", 0.0, 0.02, "vLLM's per-step CPU work: 0.5-10 ms"),
)


#: Fitted only with ``fit_frontend`` (``tokenload calibrate --fit-frontend``): the serving
#: software's costs outside the model (zero in the built-in GPU profiles but the H200's fitted
#: ``frontend_request_s``, tokenload/sim/published.py). The per-sampled-
#: sequence time shows only in batched steps (at one user it adds to the fixed overhead), so
#: fitting it takes the batched steps' TPOT too.
FRONTEND_PARAMETERS: tuple[Parameter, ...] = (
    Parameter(
        "output_token_overhead_s",
        0.0,
        0.005,
        "per token sampled: output processing, and streaming it where the API server shares the "
        "engine's CPU (assumed 0-5 ms)",
    ),
    Parameter(
        "frontend_request_s",
        0.0,
        0.05,
        "the API server's time on a request before the engine sees it: HTTP, tokenization (assumed 0-50 ms)",
    ),
)
#: Where a fit of the frontend terms starts when the base profile has none (a value of 0 sits
#: on the bound, where the search and the log-scale prior cannot move from).
FRONTEND_START = {"output_token_overhead_s": 0.0005, "frontend_request_s": 0.005}
#: Fitted only with ``fit_api`` (``tokenload calibrate --fit-api-server``): the API server's CPU
#: time per request, spent in one of ``api_server_count`` processes that serve requests one
#: after another before the engine sees them (:mod:`tokenload.sim.apiserver`). At one user it
#: is a fixed latency like ``frontend_request_s``; only a queue shows it apart: steps whose
#: throughput it caps at ``api_server_count / api_request_cpu_s`` requests a second. So it is
#: fitted to the batched steps' throughput too; where it explains the runs no better than none
#: (they never loaded the API server) it is set to 0, undetermined. ``api_prompt_token_cpu_s``
#: (its per-prompt-token part) is not fitted: telling it apart takes API-bound steps at two
#: prompt lengths; it stays the base profile's.
API_PARAMETERS: tuple[Parameter, ...] = (
    Parameter(
        "api_request_cpu_s",
        0.0,
        0.05,
        "one API server process's CPU time per request: HTTP, tokenization, detokenization, SSE "
        "(assumed 0-50 ms; vLLM's --api-server-count runs several where one caps the request rate)",
    ),
)
#: The least API cost the fit tries (it searches the cost's logarithm): 10 us a request caps a
#: process at 100,000 requests a second, none at all for this purpose.
API_FLOOR_S = 1e-5
#: Where the single-user fit of the API cost starts, and how far (in its logarithm: a factor of
#: e^1.5 = 4.5 either way) the profile search looks around what that fit found.
API_START_S = 1e-3
API_SEARCH_SPAN = 1.5
ALL_PARAMETERS = PARAMETERS + FRONTEND_PARAMETERS + API_PARAMETERS
_NAMES = frozenset(p.name for p in ALL_PARAMETERS)
#: Values that live on the profile itself, not in its efficiency section.
_TOP_LEVEL = ("step_overhead_s", "output_token_overhead_s", "frontend_request_s", "api_request_cpu_s")


#: The relative error assumed on each measured figure when stating how well the runs determine
#: each parameter (:func:`uncertainty`): a p50 of a few hundred requests has a 95 % interval of
#: a few per cent (tokenload's ci95), and the run-to-run spread adds to it. It scales the stated
#: uncertainties; it decides nothing else.
FIGURE_NOISE = 0.01
#: The prior's width on each parameter's logarithm when stating uncertainties: 1 = a factor
#: of e either way, wide against the efficiencies' bounds, so it decides only directions
#: the runs leave open.
PRIOR_LOG_WIDTH = 1.0
#: A parameter whose stated uncertainty is above this share of its value is reported as not
#: determined by the runs: 10 % is what issue #17 asks a calibration to recover parameters to.
UNDETERMINED = 0.10


@dataclass(frozen=True, slots=True)
class Fit:
    """The fitted values, the profile carrying them, each step's predicted figures, and each
    parameter's relative uncertainty (:func:`uncertainty`; None for a held one)."""

    values: dict[str, float]
    profile: Profile
    loss: float
    evaluations: int
    predictions: list[Prediction]
    uncertainty: dict[str, float | None]

    @property
    def decode_fixed_s(self) -> float:
        """The decode step's fixed time the fit implies (see :func:`decode_fixed_s`)."""
        return decode_fixed_s(self.profile, self.values)

    @property
    def undetermined(self) -> list[str]:
        """The fitted parameters these runs do not pin to UNDETERMINED (their errors move together
        with others': e.g. the per-step overhead and the weight-streaming bandwidth, which decode
        steps see only as a sum)."""
        return [k for k, u in self.uncertainty.items() if k in _NAMES and u is not None and u > UNDETERMINED]


def perturbed_values(profile: Profile, seed: int, low: float = 0.15, high: float = 0.35) -> dict[str, float]:
    """For validating a calibration: ``profile``'s fitted values, each moved by a random
    ``low``-``high`` share either way (kept 5 % of their span inside the bounds): a hidden server
    the calibrator is not told about."""
    rng = random.Random(seed)
    base = values_of(profile)
    out = {}
    for p in PARAMETERS:
        v = base[p.name] * (1 + rng.choice((-1, 1)) * rng.uniform(low, high))
        margin = 0.05 * (p.high - p.low)
        out[p.name] = min(max(v, p.low + margin), p.high - margin)
    return out


def values_of(profile: Profile) -> dict[str, float]:
    e = profile.efficiency
    return {
        "prefill_matmul": e.prefill_matmul,
        "attention": e.attention,
        "decode_bandwidth": e.decode_bandwidth,
        "kv_read": e.kv_read,
        "compute_memory_overlap": e.compute_memory_overlap,
        "step_overhead_s": profile.step_overhead_s,
        "output_token_overhead_s": profile.output_token_overhead_s,
        "frontend_request_s": profile.frontend_request_s,
        "api_request_cpu_s": profile.api_request_cpu_s,
    }


def with_values(profile: Profile, values: dict[str, float], description: str | None = None) -> Profile:
    """``profile`` with the fitted values in place (and, if given, a new description)."""
    eff = {k: v for k, v in values.items() if k not in _TOP_LEVEL}
    update: dict[str, object] = {"efficiency": profile.efficiency.model_copy(update=eff)}
    update.update({k: values[k] for k in _TOP_LEVEL if k in values})
    if description is not None:
        update["description"] = description
    return profile.model_copy(update=update)


def pinned_figures(obs: Observation, throughput: bool = False, batched_tpot: bool = True) -> list[str]:
    """The figures (Observation field names) a step pins down. A single user: TPOT and TTFT
    (exact in the emulator: nothing else runs). Users sharing the server: TPOT (unless not
    ``batched_tpot``), and with ``throughput`` (the API fit) output tokens/s, last. Their TTFT
    p50 with requests of one length depends on how the users' requests happen to line up (a
    replay that starts them otherwise differs by 20-30 % with the true profile); their TPOT by
    0-9 % and their throughput by 0-8 % (against tokenload plan's steps, H100 profile, 4-64
    users, 16-256 output tokens, 2026-12-04; short outputs the most)."""
    if obs.concurrency <= 1:
        return ["tpot_ms_p50", "ttft_ms_p50"]
    names = ["tpot_ms_p50"] if batched_tpot else []
    if throughput:
        names.append("output_tokens_per_s")
    return names


def fit_errors(
    obs: Observation, pred: Prediction, throughput: bool = False, batched_tpot: bool = True
) -> list[float]:
    """Relative errors of the figures the step pins down (:func:`pinned_figures`)."""
    pairs = [(getattr(obs, n), getattr(pred, n)) for n in pinned_figures(obs, throughput, batched_tpot)]
    return [p / m - 1.0 for m, p in pairs if m is not None and m > 0]


#: How far a closed-loop replay's throughput is from a step's with the true profile: 0-8 %
#: (see :func:`fit_errors`). A fit weighs throughput errors by FIGURE_NOISE / THROUGHPUT_NOISE
#: against the other figures' so that the stated uncertainties count a throughput as what it is
#: worth.
THROUGHPUT_NOISE = 0.04


def fit_residuals(
    obs: Observation, pred: Prediction, throughput: bool = False, batched_tpot: bool = True
) -> list[float]:
    """:func:`fit_errors` in units of FIGURE_NOISE: what the fits minimise (a throughput's
    error weighed down by THROUGHPUT_NOISE)."""
    errors = fit_errors(obs, pred, throughput, batched_tpot)
    if throughput and obs.concurrency > 1 and errors and obs.output_tokens_per_s:
        errors[-1] *= FIGURE_NOISE / THROUGHPUT_NOISE
    return errors


def to_unit(p: Parameter, v: float) -> float:
    """Bounded value -> unbounded search coordinate (logit of its place between the bounds)."""
    x = min(max((v - p.low) / (p.high - p.low), 1e-6), 1 - 1e-6)
    return math.log(x / (1 - x))


def from_unit(p: Parameter, u: float) -> float:
    # Clamped: a search step along a direction the runs do not see can be huge.
    return p.low + (p.high - p.low) / (1.0 + math.exp(-min(max(u, -60.0), 60.0)))


def uncertainty(
    residuals: Callable[[dict[str, float]], list[float]],
    values: dict[str, float],
    free: Sequence[str],
    noise: float = FIGURE_NOISE,
    derived: dict[str, Callable[[dict[str, float]], float]] | None = None,
) -> dict[str, float]:
    """Each free parameter's relative standard error if every figure carried a relative error of
    ``noise``: from the Jacobian J of the residuals in the parameters' logarithms (forward
    differences), cov = (J^T J / noise^2 + I / PRIOR_LOG_WIDTH^2)^-1 (the linearised
    least-squares estimate under a weak prior). Large where the runs cannot tell a parameter
    from others (J^T J is near singular); at most about PRIOR_LOG_WIDTH. ``derived``
    quantities (functions of the values) get theirs from the same covariance."""
    import numpy as np

    def bumped(name: str) -> dict[str, float]:
        return {**values, name: (values[name] or 1e-9) * (1 + 1e-4)}

    r0 = np.array(residuals(values))
    jac = np.empty((len(r0), len(free)))
    for j, name in enumerate(free):
        jac[:, j] = (np.array(residuals(bumped(name))) - r0) / 1e-4
    # A weak prior, a factor of e either way on each parameter, keeps a direction the runs do
    # not see at all from spilling into the parameters they do see (the inverse would be huge
    # along it and smear every variance).
    info = jac.T @ jac / noise**2 + np.eye(len(free)) / PRIOR_LOG_WIDTH**2
    cov = np.linalg.inv(info)
    out = {name: float(np.sqrt(max(cov[j, j], 0.0))) for j, name in enumerate(free)}
    for label, fn in (derived or {}).items():
        f0 = fn(values)
        grad = np.array([(fn(bumped(name)) - f0) / 1e-4 / f0 for name in free])
        out[label] = float(np.sqrt(max(grad @ cov @ grad, 0.0)))
    return out


def decode_fixed_s(profile: Profile, values: dict[str, float]) -> float:
    """Seconds a one-user decode step spends beyond its context: streaming the weights once, the
    per-step overhead, and the per-sampled-token time (``values`` as :func:`values_of` gives
    them)."""
    g = profile.gpu
    stream = g.memory_bandwidth_bytes_per_s * values["decode_bandwidth"]
    per_token = values.get("output_token_overhead_s", profile.output_token_overhead_s)
    return profile.model.weight_bytes / stream + values["step_overhead_s"] + per_token


def fit_profile(
    base: Profile,
    config: EngineConfig,
    observations: Sequence[Observation],
    fixed: dict[str, float] | None = None,
    max_evals: int = 600,
    fit_batched: bool = False,
    fit_frontend: bool = False,
    fit_api: bool = False,
) -> Fit:
    """Fit :data:`PARAMETERS` (less ``fixed``, held at the given values) to ``observations``,
    starting from ``base``'s values: on the single-user steps (cheap: one request each); with
    ``fit_batched`` (or when there is no single-user step), then on every step. With
    ``fit_frontend``, :data:`FRONTEND_PARAMETERS` too. With ``fit_api``, the API server's cost
    per request (:data:`API_PARAMETERS`) too: a search over it, the rest fitted at each value
    tried, for the least error on every step (the batched steps' throughput included)."""
    fixed = dict(fixed or {})
    start = values_of(base)
    if fit_frontend:
        fit_batched = True  # the per-token term shows only in batched steps
        start.update({k: v for k, v in FRONTEND_START.items() if start[k] <= 0})
    api = [p for p in API_PARAMETERS if fit_api and p.name not in fixed]
    start.update(fixed)
    candidates = PARAMETERS + FRONTEND_PARAMETERS if fit_frontend else PARAMETERS
    free = [p for p in candidates if p.name not in fixed]
    batched = [o for o in observations if o.concurrency > 1]
    evaluations = 0

    def api_residuals(o: Observation, q: Prediction) -> list[float]:
        # The API fit weighs the batched steps' throughput; their TPOT only if asked
        # (fit_batched): a replay's TPOT of short outputs is 0-9 % off with the true profile.
        return fit_residuals(o, q, bool(api), batched_tpot=fit_batched or not api)

    if api and batched:
        # First the API cost fitted with the rest on the single-user steps (at one user it is a
        # fixed latency the engine's terms cannot all take in), then a profile search around
        # that value: for each cost tried, the rest fitted with it held, and the cost whose fit
        # leaves the least error on every step (the batched steps' throughput included) kept.
        # Fitting the two in turn instead settles where the engine took in the first guess.
        (p_api,) = api
        start[p_api.name] = max(start[p_api.name], API_START_S)
        u, n = _fit_engine(base, config, observations, start, [*free, p_api], max_evals, fit_batched)
        evaluations += n
        first = math.log(max(from_unit(p_api, u[-1]), API_FLOOR_S))

        def profile_loss(x: float) -> float:
            nonlocal evaluations
            held = {**start, p_api.name: math.exp(x)}
            u, n = _fit_engine(base, config, observations, held, free, max_evals // 2, fit_batched)
            fitted = {p.name: from_unit(p, v) for p, v in zip(free, u, strict=True)}
            prof = with_values(base, {**held, **fitted})
            preds = [predict(prof, config, o) for o in observations]
            loss = sum(e * e for o, q in zip(observations, preds, strict=True) for e in api_residuals(o, q))
            evaluations += n + len(observations)
            return loss

        low = max(first - API_SEARCH_SPAN, math.log(API_FLOOR_S))
        high = min(first + API_SEARCH_SPAN, math.log(p_api.high))
        x, best, _ = golden_section(profile_loss, low, high, 0.02)
        # Kept only if it explains the runs better than no API cost by more than noise would:
        # a drop in the squared errors (in FIGURE_NOISE units) of 4, twice the standard error
        # of one parameter. Else the runs never loaded the API server, and a cost fitted to
        # nothing would only bend the engine's terms (measured: TTFT p50 predicted +58 to +93 %
        # off on another staircase of a server with none).
        none = profile_loss(math.log(API_FLOOR_S))
        start[p_api.name] = math.exp(x) if (none - best) / FIGURE_NOISE**2 > 4.0 else 0.0
        u, n = _fit_engine(base, config, observations, start, free, max_evals, fit_batched)
        evaluations += n
    else:
        u, n = _fit_engine(base, config, observations, start, free, max_evals, fit_batched)
        evaluations += n
    prof = with_values(base, {**start, **{p.name: from_unit(p, x) for p, x in zip(free, u, strict=True)}})
    predictions = [predict(prof, config, o) for o in observations]
    loss = sum(e * e for o, p in zip(observations, predictions, strict=True) for e in api_residuals(o, p))
    single = [o for o in observations if o.concurrency <= 1]
    used = observations if (fit_batched or api or not single) else single

    def residuals_at(values: dict[str, float]) -> list[float]:
        p = with_values(base, values)
        return [e for o in used for e in api_residuals(o, predict(p, config, o))]

    derived = {"decode_fixed_s": lambda v: decode_fixed_s(base, v)}
    names = [p.name for p in free + api]
    spread = uncertainty(residuals_at, values_of(prof), names, derived=derived) if names else {}
    stated: dict[str, float | None] = {p.name: spread.get(p.name) for p in ALL_PARAMETERS}
    stated["decode_fixed_s"] = spread.get("decode_fixed_s")
    for p in api:
        if start[p.name] <= 0:  # no evidence of a cost: undetermined, not a 0 known to 0 %
            stated[p.name] = PRIOR_LOG_WIDTH
    return Fit(values_of(prof), prof, loss, evaluations, predictions, stated)


def _fit_engine(
    base: Profile,
    config: EngineConfig,
    observations: Sequence[Observation],
    start: dict[str, float],
    free: Sequence[Parameter],
    max_evals: int,
    fit_batched: bool,
) -> tuple[list[float], int]:
    """``free``'s search coordinates fitted (the rest held at ``start``), from ``start``: on the
    single-user steps, then (``fit_batched``, or none is single) on all."""
    evaluations = 0

    def profile_at(u: list[float]) -> Profile:
        values = {**start, **{p.name: from_unit(p, x) for p, x in zip(free, u, strict=True)}}
        return with_values(base, values)

    # The weak prior :func:`uncertainty` states its figures under, in the fit too (so the two
    # agree): a parameter the runs leave open stays near the base profile's value instead of
    # wandering along its valley.
    prior_scale = FIGURE_NOISE / PRIOR_LOG_WIDTH

    def prior(u: list[float]) -> list[float]:
        return [
            prior_scale * math.log(max(from_unit(p, x), 1e-9) / max(start[p.name], 1e-9))
            for p, x in zip(free, u, strict=True)
        ]

    def residuals_on(subset: Sequence[Observation]) -> Callable[[list[float]], list[float]]:
        def residuals(u: list[float]) -> list[float]:
            prof = profile_at(u)
            return [e for o in subset for e in fit_errors(o, predict(prof, config, o))] + prior(u)

        return residuals

    def loss_on(subset: Sequence[Observation]) -> Callable[[list[float]], float]:
        residuals = residuals_on(subset)
        return lambda u: sum(e * e for e in residuals(u))

    single = [o for o in observations if o.concurrency <= 1]
    u = [to_unit(p, start[p.name]) for p in free]
    if free and single:
        # Restarted from its best point with a fresh simplex: Nelder-Mead stalls on long valleys
        # (the weight-streaming bandwidth against the per-step overhead is one), a restart goes on.
        for step in (0.5, 0.1, 0.02):
            u, _, n = nelder_mead(loss_on(single), u, step=step, max_evals=max_evals // 3)
            evaluations += n
        u, _, n = levenberg_marquardt(residuals_on(single), u)
        evaluations += n
    batched = [o for o in observations if o.concurrency > 1]
    if free and batched and (fit_batched or not single):
        u, _, n = nelder_mead(loss_on(observations), u, step=0.1, max_evals=max(60, max_evals // 10))
        evaluations += n
    return u, evaluations
