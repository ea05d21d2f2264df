"""The one option table: every option's check refuses a bad value with one line naming the option,
its variable is read when the flag is not given, the sweep forwards every run option it was given,
and the Kubernetes list and ConfigMap agree with the table."""

from __future__ import annotations

import re
from pathlib import Path
from typing import NoReturn

import configargparse
import pytest

from tokenload.loadgen.option_table import OPTIONS, add_options, env_var_names, forwarded_argv, markdown
from tokenload.sweep import _SHAPES, build_parser

ROOT = Path(__file__).resolve().parents[2]

#: A refused value for every option that checks its value (a new checked option needs one here).
BAD = {
    "--shape": "spiral",
    "--endpoint": "embeddings",
    "--workers": "-1",
    "--wait-ready": "-1",
    "--prompt-tokens": "0",
    "--output-tokens": "uniform:9-2",
    "--length-method": "guess",
    "--ttft-timeout": "0",
    "--stall-timeout": "-3",
    "--metrics-url": "ftp://server/metrics",
    "--metrics-interval": "x",
    "--metrics-discover": "vllm-metrics",
    "--metrics-discover-every": "0",
    "--gpu-peaks": "989e12",
    "--server-max-num-seqs": "-1",
    "--prometheus-url": "ftp://prometheus:9090",
    "--prometheus-selector": "{job=}",
    "--prometheus-replica-label": "pod-name",
    "--exporter-port": "70000",
    "--concurrency": "1,-2",
    "--rate": "0",
    "--arrival": "weibull",
    "--arrival-seed": "1.5",
    "--max-in-flight": "0",
    "--prompt-lengths": "121,x",
    "--step-duration": "0",
    "--warmup": "-1",
    "--knee-start": "0",
    "--knee-max": "-4",
    "--knee-factor": "1",
    "--knee-resolution": "0.5",
    "--probe-duration": "nan?",
    "--trace": "/no/such/trace.jsonl",
    "--trace-format": "parquet",
    "--trace-speed": "0",
    "--trace-window": "9:3",
    "--trace-scale-rate": "-2",
    "--trace-block-size": "0",
    "--trace-steps": "0",
    "--slo": "ttft_p95_ms=-5",
    "--slo-attainment": "1.5",
    "--slo-start": "0",
    "--slo-factor": "1",
    "--slo-max": "-1",
    "--slo-resolution": "0",
    "--slo-repeats": "-1",
    "--stop-slo": "ttft_p95=5",
    "--stop-slo-steps": "0",
    "--stop-error-rate": "1.5",
    "--time-budget": "0",
    "--settle-timeout": "-1",
    "--target-moe": "ttft_p95=5",
}


class _Refused(Exception):
    pass


class _Parser(configargparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _Refused(message)


def run_parser() -> _Parser:
    p = _Parser(prog="locust")
    add_options(p, "run", env_vars=True)
    return p


def test_every_checked_option_has_a_refused_example() -> None:
    checked = {o.flag for o in OPTIONS if o.type is not None or o.choices is not None}
    assert checked == set(BAD), "add the new option's refused value to BAD"


@pytest.mark.parametrize("flag", sorted(BAD))
def test_a_bad_value_is_one_line_naming_the_option(flag: str) -> None:
    scope = "sweep" if next(o for o in OPTIONS if o.flag == flag).scope == "sweep" else "run"
    parser = _Parser(prog="p")
    add_options(parser, scope, env_vars=False)
    with pytest.raises(_Refused) as refused:
        parser.parse_args([flag, BAD[flag]])
    message = str(refused.value)
    assert message.startswith(f"argument {flag}: ") and "\n" not in message, message
    assert "Traceback" not in message


@pytest.mark.parametrize(
    "flag", sorted(f for f in BAD if next(o for o in OPTIONS if o.flag == f).scope == "run")
)
def test_a_bad_variable_is_refused_as_its_flag(flag: str) -> None:
    option = next(o for o in OPTIONS if o.flag == flag)
    with pytest.raises(_Refused, match=f"^argument {flag}: "):
        run_parser().parse_args([], env_vars={option.env_var: BAD[flag]})


def test_variables_are_read_and_the_flag_wins() -> None:
    env = {"TOKENLOAD_PROMPT_TOKENS": "512", "TOKENLOAD_NATURAL_STOP": "true", "TOKENLOAD_KNEE_MAX": "64",
           "TOKENLOAD_METRICS_URLS": "http://a:8000/metrics,http://b:8000/metrics"}  # fmt: skip
    args = run_parser().parse_args(["--knee-max", "32"], env_vars=env)
    assert (args.prompt_tokens, args.natural_stop, args.knee_max) == ("512", True, 32)
    assert args.metrics_url == ["http://a:8000/metrics,http://b:8000/metrics"]
    quiet = run_parser().parse_args([], env_vars={"TOKENLOAD_NATURAL_STOP": "false"})
    assert quiet.natural_stop is False and quiet.prompt_tokens == "128"


def test_the_sweep_forwards_every_run_option_it_was_given() -> None:
    given = [
        "--length-method", "estimate", "--natural-stop", "--stall-timeout", "12", "--metrics-url",
        "http://a/metrics", "--metrics-url", "http://b/metrics", "--stop-slo", "ttft_p95_ms=900",
        "--arrival", "gamma:2", "--exporter-port", "9100", "--settle-timeout", "5",
    ]  # fmt: skip
    sweep_args = build_parser().parse_args([*given, "--workers", "3", "--shape", "knee"], env_vars={})
    argv = forwarded_argv(sweep_args)
    assert "--workers" not in argv and "--shape" not in argv  # the sweep's own
    # What Locust parses from the forwarded line is what the sweep parsed, option by option,
    # including the sweep's own defaults where they differ from a plain run's (its staircase).
    run = run_parser().parse_args(argv, env_vars={})
    for o in OPTIONS:
        if o.scope == "run" and o.in_sweep:
            assert getattr(run, o.dest) == getattr(sweep_args, o.dest), o.flag
    assert run.concurrency == "1,2,4,8,16,32,64"
    # Options left at Locust's default are not repeated on the command line.
    assert "--model" not in argv and "--ttft-timeout" not in argv


def test_the_sweeps_shapes_are_the_tables() -> None:
    shape = next(o for o in OPTIONS if o.flag == "--shape")
    assert set(shape.choices or ()) == set(_SHAPES)


def test_the_kubernetes_list_is_the_table() -> None:
    text = (ROOT / "k8s" / "README.md").read_text()
    block = text.split("<!-- options:begin -->\n", 1)[1].split("<!-- options:end -->", 1)[0]
    assert block == markdown(), "regenerate: python -m tokenload.loadgen.option_table"


def test_the_config_map_names_only_options_and_the_pods_own_variables() -> None:
    readme = " ".join((ROOT / "k8s" / "README.md").read_text().split())
    said = readme.split("Besides these, the pods read", 1)[1].split("<!-- options:begin -->", 1)[0]
    pods_own = set(re.findall(r"`(TOKENLOAD_[A-Z_]+)`", said))
    assert pods_own and not pods_own & set(env_var_names())  # no option's variable is a pod's own
    run_env = (ROOT / "k8s" / "base" / "run.env").read_text()
    names = set(re.findall(r"^(TOKENLOAD_[A-Z_]+)=", run_env, flags=re.M))
    assert names - set(env_var_names()) <= pods_own, names - set(env_var_names()) - pods_own
    script = (ROOT / "k8s" / "base" / "scripts" / "tokenload_k8s.py").read_text()
    assert set(re.findall(r'"(TOKENLOAD_[A-Z_]+)"', script)) - {"TOKENLOAD_"} <= pods_own | {
        "TOKENLOAD_METRICS_URLS"
    }


def test_each_option_is_declared_once() -> None:
    flags = [o.flag for o in OPTIONS]
    assert len(flags) == len(set(flags))
    assert len(env_var_names()) == len([o for o in OPTIONS if o.scope == "run"])


def test_the_recorded_configuration_has_no_url_credentials() -> None:
    # summary.json's config (and search.argv, the equivalent command's source) is pasted into
    # tickets: a --metrics-url's user:password must not be in it.
    from types import SimpleNamespace

    from tokenload.loadgen.options import run_config
    from tokenload.report.redact import redact

    opts = SimpleNamespace(metrics_url=["http://u:pw@10.0.0.6:8000/metrics"])
    assert run_config(opts).public_dict()["metrics_urls"] == ["http://***@10.0.0.6:8000/metrics"]
    argv = forwarded_argv({"metrics_url": ["http://u:pw@10.0.0.6:8000/metrics"]}, ["server"])
    assert "pw" in " ".join(argv) and "pw" not in " ".join(redact(argv))
