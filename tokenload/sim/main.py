"""``tokenload sim``: the built-in vLLM emulator, served over HTTP on loopback by default."""

from __future__ import annotations

import argparse
import dataclasses
import gc
import sys
from typing import Any, NoReturn

from pydantic import ValidationError

from tokenload.cli_args import OneLineParser
from tokenload.sim.engine_config import EngineConfig
from tokenload.sim.profile import DEFAULT_PROFILE

__all__ = ["build_parser", "engine_setup", "main"]


def _engine_help(field: str) -> str:
    """A flag's help from ``EngineConfig``'s own description and default (written once there)."""
    info = EngineConfig.model_fields[field]
    text = (info.description or "").rstrip(".")
    text = text[:1].lower() + text[1:]
    if info.default is not None:
        text += f" (default {info.default})"
    return text


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="tokenload sim",
        description="A vLLM-compatible engine emulator: continuous batching, chunked prefill, a paged KV "
        "cache with preemption, latencies from a roofline model of the GPU. No GPU needed.",
    )
    p.add_argument(
        "--list-profiles", action="store_true", help="list the built-in hardware profiles and exit"
    )
    p.add_argument(
        "--profile", default=None, help=f"built-in profile name or a YAML file (default {DEFAULT_PROFILE})"
    )
    p.add_argument("--host", default="127.0.0.1", help="bind address (default loopback only)")
    p.add_argument("--port", type=int, default=8000, help="port; 0 picks a free one")
    p.add_argument(
        "--served-model-name",
        default=None,
        help="the model id /v1/models lists (default: the profile's model)",
    )
    p.add_argument(
        "--tokenizer",
        default=None,
        metavar="FILE",
        help="a Hugging Face tokenizer.json (or its folder) to count and stream text with, as the real "
        "model does (needs the tokenizers package); default the byte tokenizer, one token per UTF-8 byte",
    )
    g = p.add_argument_group("engine (vLLM's flags)")
    g.add_argument(
        "--preset",
        choices=["v1", "v0"],
        default="v1",
        help="v1: chunked prefill (default); v0: prefill-first",
    )
    g.add_argument("--max-num-seqs", type=int, default=None, help=_engine_help("max_num_seqs"))
    g.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=None,
        help=_engine_help("max_num_batched_tokens"),
    )
    g.add_argument(
        "--num-gpu-blocks", type=int, default=None, help="KV cache size in blocks (overrides the profile)"
    )
    g.add_argument(
        "--max-model-len",
        type=int,
        default=None,
        help="context: prompt + output tokens (default: the profile's model)",
    )
    g.add_argument("--block-size", type=int, default=None, help=_engine_help("block_size"))
    g.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=None,
        help=_engine_help("gpu_memory_utilization"),
    )
    g.add_argument(
        "--enable-prefix-caching", action="store_true", default=None, help="reuse cached prompt prefixes"
    )
    g.add_argument(
        "--api-server-count",
        type=int,
        default=None,
        help="API server processes (vLLM's flag; default 1): each serves requests one at a time for the "
        "profile's api_request_cpu_s + api_prompt_token_cpu_s x prompt tokens",
    )
    g.add_argument("--seed", type=int, default=0, help="seeds output lengths and fault injection (default 0)")
    g.add_argument(
        "--output-len",
        default=None,
        help="natural output length without ignore_eos: fixed:N, uniform:A-B or lognormal:MEAN[:SIGMA]",
    )
    g.add_argument(
        "--metrics-names", choices=["v1", "v0"], default="v1", help="metric name generation on /metrics"
    )
    g.add_argument("--trace", default=None, help="write one JSON line per request with the server-side times")
    r = p.add_argument_group("a fleet (tokenload.sim.router)")
    r.add_argument(
        "--replicas",
        type=int,
        default=1,
        help="emulated replicas behind --port, each a whole server with its own engine and /metrics on a "
        "port of its own (GET /sim/replicas lists them); default 1: no router",
    )
    r.add_argument(
        "--routing",
        default="round_robin",
        help="how the router picks a replica: round_robin (default), random, least_requests or "
        "weighted:W1,W2,... (one weight per replica)",
    )
    f = p.add_argument_group("fault injection (per-request rates, seeded by --seed)")
    f.add_argument("--http-500-rate", type=float, default=0.0, help="share of requests answered HTTP 500")
    f.add_argument(
        "--http-429-rate", type=float, default=0.0, help="share answered HTTP 429 (with Retry-After)"
    )
    f.add_argument("--retry-after-s", type=int, default=1, help="the 429s' Retry-After, seconds (default 1)")
    f.add_argument("--disconnect-rate", type=float, default=0.0, help="share of streams cut mid-way")
    f.add_argument(
        "--malformed-rate", type=float, default=0.0, help="share of streams with a malformed SSE event"
    )
    f.add_argument(
        "--error-event-rate", type=float, default=0.0, help="share of streams ending in an error event"
    )
    f.add_argument("--stall-rate", type=float, default=0.0, help="share of streams that stall for --stall-s")
    f.add_argument("--stall-s", type=float, default=5.0, help="a stall's length, seconds (default 5)")
    f.add_argument(
        "--fault-after-tokens",
        type=int,
        default=8,
        help="tokens streamed before a mid-stream fault (default 8)",
    )
    f.add_argument(
        "--tokenize-delay-s",
        type=float,
        default=0.0,
        help="every POST /tokenize answers this many seconds late (a busy API process)",
    )
    f.add_argument(
        "--tokenize-error-rate", type=float, default=0.0, help="share of POST /tokenize calls answering 503"
    )
    f.add_argument(
        "--startup-delay-s", type=float, default=0.0, help="/health answers 503 this long (a slow model load)"
    )
    return p


def _output_len(spec: str) -> dict[str, Any]:
    kind, _, rest = spec.partition(":")
    try:
        if kind == "fixed":
            return {"distribution": "fixed", "mean_tokens": float(rest)}
        if kind == "uniform":
            lo, _, hi = rest.partition("-")
            return {"distribution": "uniform", "low_tokens": int(lo), "high_tokens": int(hi)}
        if kind == "lognormal":
            mean, _, sigma = rest.partition(":")
            out: dict[str, Any] = {"distribution": "lognormal", "mean_tokens": float(mean)}
            if sigma:
                out["sigma"] = float(sigma)
            return out
    except ValueError:
        pass
    raise ValueError(f"--output-len: expected fixed:N, uniform:A-B or lognormal:MEAN[:SIGMA], got {spec!r}")


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    field = ".".join(str(x) for x in err["loc"]) or "config"
    return f"--{field.replace('_', '-')}: {err['msg']} (got {err.get('input')!r})"


def engine_setup(args: argparse.Namespace) -> tuple[Any, Any]:
    """The profile and engine configuration the parsed emulator options describe (raises
    ProfileError, ValidationError or ValueError on bad values)."""
    from tokenload.sim.engine import EngineConfig
    from tokenload.sim.profile import load_profile

    profile = load_profile(args.profile or DEFAULT_PROFILE)
    cfg: dict[str, Any] = {"preset": args.preset, "seed": args.seed}
    for name in (
        "max_num_seqs",
        "max_num_batched_tokens",
        "num_gpu_blocks",
        "max_model_len",
        "block_size",
        "gpu_memory_utilization",
        "enable_prefix_caching",
        "api_server_count",
    ):
        value = getattr(args, name)
        if value is not None:
            cfg[name] = value
    if args.output_len:
        cfg["output_len"] = _output_len(args.output_len)
    return profile, EngineConfig(**cfg)


def engine_from_text(sim_args: str, offline: bool = False) -> tuple[Any, Any]:
    """The profile and engine configuration of an emulator command line given as one string
    (``--sim-args`` of plan, calibrate and sweep); ValueError with one line on bad values.
    ``offline`` (plan, calibrate: one engine in simulated time): a fleet or fault-injection flag,
    which that does not emulate, is refused rather than ignored."""
    import shlex

    from pydantic import ValidationError

    from tokenload.sim.profile import ProfileError

    parser = build_parser()

    def refuse(message: str) -> NoReturn:
        raise ValueError(message)

    parser.error = refuse  # type: ignore[method-assign]
    try:
        args = parser.parse_args(shlex.split(sim_args))
        if offline:
            _refuse_online_flags(args, parser.parse_args([]))
        return engine_setup(args)
    except ProfileError as exc:
        raise ValueError(str(exc)) from None
    except ValidationError as exc:
        raise ValueError(_first_error(exc)) from None


def _refuse_online_flags(args: argparse.Namespace, defaults: argparse.Namespace) -> None:
    """ValueError naming the first fleet (``--replicas``, ``--routing``) or fault-injection flag
    (FaultConfig's fields) set away from its default."""
    from tokenload.sim.faults import FaultConfig

    online = ["replicas", "routing", *(f.name for f in dataclasses.fields(FaultConfig) if f.name != "seed")]
    for name in online:
        if hasattr(args, name) and getattr(args, name) != getattr(defaults, name):
            flag = "--" + name.replace("_", "-")
            raise ValueError(
                f"{flag} is not emulated here (one engine in simulated time: no router, no "
                "faults); leave it out"
            )


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from tokenload.sim.profile import ProfileError, list_profiles
    from tokenload.sim.router import parse_routing

    if args.list_profiles:
        from tokenload.sim.profile import load_profile

        for name in list_profiles():
            prof = load_profile(name)
            print(f"{name:<24} {prof.gpu.name}, {prof.model.name}")
        return 0
    from tokenload.sim.engine import SimEngine
    from tokenload.sim.faults import FaultConfig, FaultPlan
    from tokenload.sim.metrics import SimMetrics

    try:
        profile, config = engine_setup(args)
        if args.replicas < 1:
            raise ValueError(f"--replicas: expected a positive integer, got {args.replicas}")
        routing = parse_routing(args.routing, args.replicas)
        faults = FaultConfig(
            http_500_rate=args.http_500_rate,
            http_429_rate=args.http_429_rate,
            retry_after_s=args.retry_after_s,
            disconnect_rate=args.disconnect_rate,
            malformed_rate=args.malformed_rate,
            error_event_rate=args.error_event_rate,
            stall_rate=args.stall_rate,
            stall_s=args.stall_s,
            fault_after_tokens=args.fault_after_tokens,
            startup_delay_s=args.startup_delay_s,
            tokenize_delay_s=args.tokenize_delay_s,
            tokenize_error_rate=args.tokenize_error_rate,
            seed=args.seed,
        )
        faults.validate()
        name = args.served_model_name or profile.model.name
        vocabulary = None
        if args.tokenizer:
            from tokenload.sim.vocab import load_tokenizer_file

            vocabulary = load_tokenizer_file(args.tokenizer)
        replicas = []
        for i in range(args.replicas):
            # Each replica its own engine, metrics and draws (seed + i).
            cfg_i = config if i == 0 else config.model_copy(update={"seed": config.seed + i})
            metrics = SimMetrics(
                name,
                config.max_model_len or profile.model.max_model_len,
                names=args.metrics_names,
                max_num_seqs=config.max_num_seqs,
            )
            engine = SimEngine(profile, cfg_i, served_model_name=name, metrics=metrics, vocabulary=vocabulary)
            fault_i = faults if i == 0 else dataclasses.replace(faults, seed=faults.seed + i)
            replicas.append((engine, metrics, fault_i))
    except ProfileError as exc:
        parser.exit(2, f"tokenload sim: {exc}\n")
    except ValidationError as exc:
        parser.exit(2, f"tokenload sim: {_first_error(exc)}\n")
    except ValueError as exc:
        parser.exit(2, f"tokenload sim: {exc}\n")

    from tokenload.serving.http import HTTPServer
    from tokenload.sim.api import SimAPI
    from tokenload.sim.router import Router

    trace = open(args.trace, "a", buffering=1, encoding="utf-8") if args.trace else None  # noqa: SIM115
    http = HTTPServer(args.host, args.port)
    try:
        http.start()
    except OSError as exc:
        parser.exit(2, f"tokenload sim: --port: cannot listen on {args.host}:{args.port}: {exc.strerror}\n")
    apis = []
    for i, (engine, metrics, fault) in enumerate(replicas):
        apis.append(
            SimAPI(
                engine,
                metrics,
                FaultPlan(fault),
                trace,
                startup_delay_s=args.startup_delay_s,
                replica=i if len(replicas) > 1 else None,
            )
        )
    host, port = http.address
    if len(apis) == 1:
        apis[0].register(http)
    else:
        urls = []
        for api in apis:
            own = HTTPServer(args.host, 0)
            own.start()
            api.register(own)
            urls.append("http://{}:{}".format(*own.address))
        Router(apis, urls, *routing, seed=args.seed).register(http)
        print(f"tokenload sim: {len(apis)} replicas routed {args.routing}: {' '.join(urls)}", flush=True)
    print(
        f"tokenload sim: {profile.name} ({profile.gpu.name}, {profile.model.name}), preset {args.preset}, "
        f"{engine.num_gpu_blocks} KV blocks of {engine.config.block_size}, max_num_seqs "
        f"{engine.config.max_num_seqs}, max_model_len {engine.max_model_len}",
        flush=True,
    )
    # Thousands of live requests make the cyclic GC's full collections take tens of ms, which
    # would land on token send times; collect young objects only, less often (and, while
    # requests run, only where the engine loop has time to spare: loop._collect).
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 50, 1_000)
    return http.serve_until_interrupted(f"tokenload sim listening on http://{host}:{port}")


if __name__ == "__main__":
    sys.exit(main())
