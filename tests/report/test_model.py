"""What a report says, on hand-built summaries (pure, fast): re-diagnosis, failures by class,
the per-step table, edge cases (no steps, no server metrics) in markdown and HTML."""

from __future__ import annotations

import copy
import shlex

import pytest

from tokenload.analysis.thresholds import Thresholds
from tokenload.report.capacity import Target, parse_slo
from tokenload.report.html import render_html
from tokenload.report.markdown import render_markdown
from tokenload.report.model import build_model, reconstructed_command, refresh_verdicts
from tokenload.report.tables import COLUMNS, failure_counts, step_cells, text_table, verdict_label

pytestmark = pytest.mark.simulated_time


def step(
    i: int, users: int, tput: float, ttft: float, *, failed: dict | None = None, server: dict | None = None
):
    return {
        "index": i,
        "concurrency": users,
        "target_rate_rps": None,
        "start": 100.0 + 10 * i,
        "measure_start": 102.0 + 10 * i,
        "end": 110.0 + 10 * i,
        "measured_s": 8.0,
        "requests": {"ok": 40, "failed": sum((failed or {}).values()), "by_failure_class": failed or {}},
        "ttft_ms": {"p50": ttft, "p90": ttft, "p95": ttft, "p99": ttft},
        "tpot_ms": {"p50": 7.0, "p90": 7.1, "p95": 7.2, "p99": 7.5},
        "itl_ms": {"p50": 7.0, "p90": 7.1, "p95": 7.2, "p99": 9.0},
        "e2e_ms": {"p50": 500.0, "p90": 510.0, "p95": 520.0, "p99": 530.0},
        "requests_per_s": tput / 64,
        "output_tokens_per_s": tput,
        "server": server,
        "client": {"cpu_percent_max": 10.0, "loop_lag_ms_p99": 1.0},
        "flags": [],
        # A stale verdict from the run: the report must recompute it.
        "verdict": {"bottleneck": "compute", "saturated": True, "evidence": [], "advice": []},
    }


def summary(steps: list[dict]) -> dict:
    return {
        "schema_version": 1,
        "run_id": "hand",
        "host": "http://127.0.0.1:9",
        "started_at": 100.0,
        "config": {
            "api_key_env": "OPENAI_API_KEY",
            "api_key_set": True,
            "prompt_tokens": "128",
            "output_tokens": "64",
            "api_key": "sk-should-never-show",
        },
        "steps": steps,
        "knee": None,
    }


def test_verdicts_and_knee_are_recomputed() -> None:
    s = summary([step(0, 1, 100, 30), step(1, 4, 390, 35), step(2, 16, 420, 3000)])
    fresh = refresh_verdicts(s)
    assert [st["verdict"]["bottleneck"] for st in fresh["steps"]][:2] == ["none", "none"]
    assert fresh["knee"] is not None and fresh["knee"]["step"] == 2
    assert s["steps"][0]["verdict"]["bottleneck"] == "compute"  # the input is not modified
    lenient = refresh_verdicts(s, Thresholds(scaling_efficiency=0.0, saturation_gain=0.0))
    assert lenient["knee"] is None


def test_a_failing_target_is_said_to_fail_not_to_have_run_out() -> None:
    """A target that refuses connections from its second step: the headline names the failures
    (no resource "ran out")."""
    failing = step(1, 4, 0.0, 30, failed={"connect_error": 900, "http_5xx": 20})
    failing["requests"]["ok"] = 0
    model = build_model(summary([step(0, 1, 100, 30), failing]), [], [])
    text = model.knee_sentence()
    assert text.startswith(
        "Failing from step 1 (4 users): 100% of its requests failed (mostly connect_error)"
    )
    assert "ran out" not in text and "Saturated" not in text
    assert "Failing from step 1" in render_markdown(model)


def test_the_report_judges_again_with_the_cap_the_run_was_given() -> None:
    # summary.json keeps --server-max-num-seqs; the report's verdicts use it as the run's did.
    srv = {"requests_running": {"mean": 4.0, "max": 4.0}, "requests_waiting": {"mean": 4.0},
           "kv_cache_usage_ratio": {"mean": 0.1, "max": 0.1}}  # fmt: skip
    low = {"requests_running": {"mean": 2.0, "max": 2.0}, "requests_waiting": {"mean": 0.0}}
    s = summary([step(0, 2, 100, 30, server=low), step(1, 8, 130, 2000, server=srv)])
    assert refresh_verdicts(s)["steps"][1]["verdict"]["bottleneck"] == "unknown"
    s["server_max_num_seqs"] = 4
    assert refresh_verdicts(s)["steps"][1]["verdict"]["bottleneck"] == "scheduler_limit"


def test_failures_by_class_over_the_run_and_per_step() -> None:
    steps = [step(0, 1, 100, 30), step(1, 4, 390, 35, failed={"http_5xx": 3, "ttft_timeout": 1})]
    records = [{"status": "ok"}] * 5 + [
        {"status": "failed", "failure_class": "http_5xx"},
        {"status": "failed", "failure_class": "http_5xx"},
        {"status": "failed", "failure_class": "connect_error"},
        {"status": "failed", "failure_class": None},
    ]
    header, rows = failure_counts(steps, records)
    assert header == ["class", "whole run", "step 0 (measured)", "step 1 (measured)"]
    assert rows == [
        ["connect_error", "1", "0", "0"],
        ["http_5xx", "2", "0", "3"],
        ["ttft_timeout", "0", "0", "1"],
        ["unknown", "1", "0", "0"],
    ]
    assert failure_counts(steps[:1], [{"status": "ok"}]) == (["class", "whole run", "step 0 (measured)"], [])


def test_step_cells_and_text_table() -> None:
    srv = {"kv_cache_usage_ratio": {"mean": 0.5, "max": 0.93}, "requests_waiting": {"mean": 2.5},
           "preemptions": {"increase": 3.0}}  # fmt: skip
    s = refresh_verdicts(summary([step(0, 1, 100, 30), step(1, 16, 120, 900, server=srv)]))
    cells = step_cells(s["steps"][1])
    assert len(cells) == len(COLUMNS)
    assert cells[:4] == ["1", "16 users", "1.88", "120.0"] and cells[8:11] == ["0.50/0.93", "2.5", "3"]
    assert step_cells(s["steps"][0])[8] == "-"  # no server metrics: '-' not 0
    table = text_table(COLUMNS, [step_cells(x) for x in s["steps"]])
    assert len({len(line) for line in table.splitlines()[:1]}) == 1 and "16 users" in table


def test_markdown_and_html_for_edge_cases() -> None:
    # No steps at all, no records, no scrapes: a report that says so rather than failing.
    empty = build_model(summary([]), [], [])
    md, html = render_markdown(empty), render_html(empty)
    assert "Not saturated at any step" in md and "No failed requests." in md
    assert (
        html.count('data-points="0"') == html.count("<figure") > 0 and "no steps in this run" in html.lower()
    )
    # The secret-named config entry is redacted; the key's variable name is kept.
    for text in (md, html):
        assert "sk-should-never-show" not in text and "OPENAI_API_KEY" in text and "***" in text


def test_slo_capacity_and_plan_are_stated() -> None:
    s = summary([step(0, 1, 100, 30), step(1, 4, 390, 35), step(2, 16, 420, 3000)])
    base = {"step": 1, "phase": "measure", "status": "ok", "tpot_ms": 7, "output_tokens": 64}
    records = [{**base, "ttft_ms": 35, "e2e_ms": 500}, {**base, "ttft_ms": 600, "e2e_ms": 900}]
    model = build_model(s, records, [], slo=parse_slo("ttft_p95_ms=500"), target=Target("users", 40))
    assert model.capacity is not None and model.capacity.load == 4
    assert model.plan is not None and model.plan.replicas == 12  # ceil(40 / 4 x 1.2)
    md = render_markdown(model)
    assert "| 2 | 16 users | 3000.0 FAIL | no |" in md
    assert "1/2 = 50.0 %" in md and "ceil(40 users / 4 users per replica x (1 + 0.2 headroom)) = 12" in md
    assert 'class="slo"' in render_html(model)
    # A target with no step meeting the SLO: said, not crashed.
    none = build_model(s, records, [], slo=parse_slo("ttft_p95_ms=1"), target=Target("rps", 5))
    assert none.plan is None and "no step meets the SLO" in render_markdown(none)


def test_reconstructed_command() -> None:
    s = summary([step(0, 1, 100, 30), step(1, 4, 390, 35)])
    cmd = reconstructed_command(s)
    assert cmd == (
        "tokenload sweep --host http://127.0.0.1:9 --concurrency 1,4 --step-duration 10 --warmup 2 "
        "--prompt-tokens 128 --output-tokens 64"
    )
    s2 = copy.deepcopy(s)
    s2["host"] = "http://user:pw@h:1"
    assert "pw" not in reconstructed_command(s2)
    # The locustfile's API path is recorded (endpoints); a chat run says so, a completions run
    # is the sweep's default.
    s2["config"]["endpoints"] = ["/v1/chat/completions"]
    assert "--endpoint chat" in reconstructed_command(s2)
    s2["config"]["endpoints"] = ["/v1/completions"]
    assert "--endpoint" not in reconstructed_command(s2)


def test_a_reconstructed_command_reruns_the_shape_and_the_emulator() -> None:
    # Found 2026-12-05: a rate run's command had no --rate (rerun, it was a staircase of the
    # default levels), and a run against the built-in emulator named the port it happened to
    # have (--host http://127.0.0.1:43313), which no rerun can reach.
    rate = summary([step(0, None, 100, 30), step(1, None, 190, 35)])
    rate["steps"][0]["target_rate_rps"], rate["steps"][1]["target_rate_rps"] = 2.0, 4.5
    rate["search"] = {"shape": "rate", "arrival": "poisson"}
    rate["config"]["target_emulator"] = "tokenload sim --profile h100-llama3.1-8b --max-num-seqs 8"
    assert reconstructed_command(rate) == (
        "tokenload sweep '--sim-args=--profile h100-llama3.1-8b --max-num-seqs 8' --shape rate --rate 2,4.5 "
        "--step-duration 10 --warmup 2 --prompt-tokens 128 --output-tokens 64"
    )
    rate["config"]["target_emulator"] = "tokenload sim"  # the default profile: no --sim-args
    rate["search"]["arrival"] = "gamma:2"
    assert reconstructed_command(rate).startswith(
        "tokenload sweep --shape rate --rate 2,4.5 --arrival gamma:2 "
    )
    # The option names the emulator only where it ran: against another host it is not believed.
    rate["host"] = "http://gpu-box:8000"
    assert reconstructed_command(rate).startswith("tokenload sweep --host http://gpu-box:8000 --shape rate ")
    context = summary([step(0, 1, 100, 30), step(1, 1, 90, 35), step(2, 1, 80, 40)])
    for s, n in zip(context["steps"], (121, 511, 2041), strict=True):
        s["prompt_tokens"] = str(n)
    context["search"] = {"shape": "context_sweep"}
    cmd = reconstructed_command(context)
    assert "--shape context --prompt-lengths 121,511,2041 --concurrency 1 " in cmd, cmd
    assert "--prompt-tokens" not in cmd  # each step's own length, above
    # Walkthrough: "--sim-args --enable-prefix-caching" (a lone value starting with '-' is an option
    # to argparse: the sweep refused its own command), and a workload file's run named the length
    # options' defaults instead of the file.
    rate["host"] = ""
    rate["config"]["target_emulator"] = "tokenload sim --enable-prefix-caching"
    rate["config"]["workload_file"] = "wl/prefix.yaml"
    cmd = reconstructed_command(rate)
    assert cmd.startswith("tokenload sweep --sim-args=--enable-prefix-caching --shape rate "), cmd
    assert (
        "--workload wl/prefix.yaml" in cmd and "--prompt-tokens" not in cmd and "--output-tokens" not in cmd
    )
    knee = summary([step(0, 4, 100, 30), step(1, 16, 190, 35), step(2, 8, 150, 32)])
    knee["search"] = {"shape": "knee"}
    assert "--shape knee" in reconstructed_command(knee) and "--concurrency" not in reconstructed_command(
        knee
    )


def test_a_reconstructed_command_is_one_a_shell_runs() -> None:
    """Review findings: an SLO search's command lacked its --slo (the sweep refuses that), a run
    with no steps ended in empty flags, and a host or model with shell characters came out bare."""
    slo = summary([step(0, None, 100, 30)])
    slo["steps"][0]["target_rate_rps"] = 4.0
    slo["search"] = {"shape": "slo", "slo": "ttft_p95_ms=500", "slo_attainment": 0.9, "arrival": "poisson"}
    assert "--shape slo --slo ttft_p95_ms=500 --slo-attainment 0.9 --step-duration" in reconstructed_command(
        slo
    )
    empty = summary([])
    for shape in ("rate", "context_sweep", "slo", None):
        empty["search"] = {"shape": shape} if shape else None
        words = shlex.split(reconstructed_command(empty))
        assert all(w for w in words) and words[-1] != "--rate" and "--concurrency" not in words, words
    odd = summary([step(0, 1, 100, 30)])
    odd["host"] = "http://h:1/x?a=1&b=2"
    odd["config"]["model"] = "my model"
    words = shlex.split(reconstructed_command(odd))
    assert words[words.index("--host") + 1] == "http://h:1/x?a=1&b=2"
    assert words[words.index("--model") + 1] == "my model"


def test_the_reports_say_what_the_search_found_and_why_the_run_stopped() -> None:
    # Walkthrough: the stop reason (--stop-slo, --knee-max, --time-budget) and the knee search's
    # bracket were printed on the console only; report.md and report.html never said them.
    s = summary([step(0, 1, 100, 30), step(1, 4, 390, 35)])
    s["search"] = {
        "shape": "knee", "outcome": "not_saturated", "probes": [{}, {}],
        "last_unsaturated_concurrency": 4, "first_saturated_concurrency": None,
        "stop_reason": "not saturated up to --knee-max 4 users",
    }  # fmt: skip
    model = build_model(s, [], [])
    md, html = render_markdown(model), render_html(model)
    for text in (md, html):
        assert "knee search: not_saturated, not saturated up to 4 users (2 steps)" in text
        assert "stopped: not saturated up to --knee-max 4 users" in text
    plain = build_model(summary([step(0, 1, 100, 30)]), [], [])
    assert "stopped:" not in render_markdown(plain) and "knee search" not in render_html(plain)


def test_a_knee_search_names_the_drifting_steps_it_steered_by() -> None:
    # Walkthrough: the knee search decided from a 64-user probe flagged drifting, and said nothing.
    from tokenload.report.search_text import search_lines

    probes = [{"concurrency": 32, "flags": []}, {"concurrency": 64, "flags": ["drifting"]}]
    search = {"shape": "knee", "outcome": "found", "last_unsaturated_concurrency": 32,
              "first_saturated_concurrency": 64, "probes": probes}  # fmt: skip
    lines = search_lines({"search": search, "knee": {"step": 1}})
    assert lines[0] == "knee search: found, between 32 and 64 users (2 steps)"
    assert "(64 users; flagged drifting)" in lines[1]
    search.update(outcome="undecided", last_unsaturated_concurrency=None, first_saturated_concurrency=None)
    search.update(
        probes=[{"concurrency": 8, "flags": []}], stop_reason="the step at 8 users could not be judged"
    )
    assert search_lines({"search": search}) == [
        "knee search: undecided, no bracket (1 step)",
        "stopped: the step at 8 users could not be judged",
    ]


def test_a_reconstructed_command_gives_the_shape_options_the_run_recorded() -> None:
    # Walkthrough: a knee run's command dropped --knee-max and --time-budget, and its step
    # duration was read back from steps that were half-length probes; a trace run lost its file.
    knee = summary([step(0, 4, 100, 30), step(1, 16, 190, 35)])
    knee["search"] = {
        "shape": "knee",
        "argv": ["--step-duration", "20.0", "--knee-max", "64", "--time-budget", "300.0", "--drain"],
    }
    words = shlex.split(reconstructed_command(knee))
    assert words[words.index("--step-duration") + 1] == "20.0" and words.count("--step-duration") == 1
    assert words[words.index("--knee-max") + 1] == "64" and words[words.index("--time-budget") + 1] == "300.0"
    assert "--drain" in words and "--warmup" not in words  # the default warmup: not recorded
    staircase = summary([step(0, 1, 100, 30), step(1, 2, 190, 35)])
    staircase["search"] = {"shape": "StaircaseShape", "argv": ["--concurrency", "1,2,4", "--stop-slo",
                                                               "ttft_p95_ms=900"]}  # fmt: skip
    words = shlex.split(reconstructed_command(staircase))
    # Asked for 1,2,4; the stop rule ended it after 2: a rerun asks for the same.
    assert words[words.index("--concurrency") + 1] == "1,2,4" and "--stop-slo" in words


def test_a_trace_replays_sent_rate_is_over_its_sends_not_the_steps_measured_part() -> None:
    from tokenload.report.trace_text import trace_lines

    dist = {"mean": 100.0, "p50": 100.0, "p90": 100.0, "p99": 100.0}
    trace = {"source": "t.jsonl", "format": "jsonl", "rows": 11, "duration_s": 10.0,
             "mean_rate_rps": 1.0, "input_tokens": dist, "output_tokens": dist}  # fmt: skip
    # Eleven rows sent on time, one a second; the step's measured part ran 20 s (to drain).
    sent = [{"wall_start": 1000.0 + i, "send_lag_ms": 2.0, "status": "ok"} for i in range(11)]
    steps = [{"index": 0, "achieved_rate_rps": 11 / 20}]
    first = trace_lines(trace, steps, sent)[0]
    assert "mean rate 1.00 req/s offered, 1.00 req/s sent (first send to last)" in first, first
    assert not any("Only" in line for line in trace_lines(trace, steps, sent))
    assert any("Only 5 of the 11 rows" in line for line in trace_lines(trace, steps, sent[:5]))


def test_an_open_loop_that_could_not_send_its_rate_is_said_in_the_report() -> None:
    # Walkthrough: a rate step whose arrivals waited for a free user (87.5 %) was flagged
    # pool_exhausted in summary.json only; the report's headline said "Not saturated".
    s = summary([step(0, None, 100, 30)])
    s["steps"][0].update(target_rate_rps=4.0, achieved_rate_rps=1.5, queued_for_user_share=0.875)
    s["steps"][0]["flags"] = ["pool_exhausted"]
    md = render_markdown(build_model(s, [], []))
    assert "88 % of its arrivals waited for a free user (flagged pool_exhausted; 1.50 req/s sent)" in md
    assert verdict_label(s["steps"][0]).endswith("(pool_exhausted)")


def test_a_reconstructed_command_keeps_the_scrape_of_a_server_it_did_not_start() -> None:
    # Walkthrough: a fleet swept with --metrics-url per replica (and another with
    # --prometheus-url) got an equivalent command with neither; rerun, it scraped the router.
    fleet = summary([step(0, 4, 100, 30)])
    fleet["host"] = "http://10.0.0.5:8000"
    fleet["search"] = {"shape": "StaircaseShape", "argv": [
        "--metrics-url", "http://10.0.0.6:8000/metrics", "--metrics-url", "http://10.0.0.7:8000/metrics",
        "--prometheus-selector", '{job="vllm"}', "--ttft-timeout", "30.0"]}  # fmt: skip
    words = shlex.split(reconstructed_command(fleet))
    assert [words[i + 1] for i, w in enumerate(words) if w == "--metrics-url"] == [
        "http://10.0.0.6:8000/metrics",
        "http://10.0.0.7:8000/metrics",
    ]
    assert words[words.index("--prometheus-selector") + 1] == '{job="vllm"}' and "--ttft-timeout" in words
    # Against the emulator the sweep started, its replicas' ports were that run's: left out.
    fleet["host"] = ""
    fleet["config"]["target_emulator"] = "tokenload sim --replicas 2"
    words = shlex.split(reconstructed_command(fleet))
    assert "--metrics-url" not in words and "--sim-args=--replicas 2" in words


def test_the_headline_reads_for_a_fleet_and_for_rate_steps() -> None:
    # Walkthrough: "imbalance ran out", and the console said "saturated at step 1 (8 users):
    # errors" where the report said "Failing from step 1" (the console now prints this sentence).
    from tokenload.report.model import knee_sentence

    s = summary([step(0, 1, 100, 30), step(1, 4, 390, 35)])
    s["knee"] = {"step": 1, "bottleneck": "imbalance", "last_unsaturated_concurrency": 1}
    assert "some replicas ran out while others had room (imbalance" in knee_sentence(s)
    s["steps"][1].update(concurrency=None, target_rate_rps=4.0)
    s["knee"] = {"step": 1, "bottleneck": "compute", "last_unsaturated_concurrency": None,
                 "last_unsaturated_rate_rps": 2.0}  # fmt: skip
    assert "compute ran out; the last unsaturated step ran 2 req/s." in knee_sentence(s)
    s["knee"]["last_unsaturated_rate_rps"] = None
    assert "None" not in knee_sentence(s)


def test_a_fleets_report_shows_each_replica_not_only_their_mean() -> None:
    # Walkthrough: report.md's KV use read 0.53/0.55 for a fleet whose hot replica sat at
    # 0.95/1.0; only report.html's charts drew each replica.
    hot = {"kv_cache_usage_ratio": {"mean": 0.95, "max": 1.0}, "requests_running": {"mean": 8.0},
           "requests_waiting": {"mean": 6.7}, "preemptions": {"increase": 12}}  # fmt: skip
    cold = {"kv_cache_usage_ratio": {"mean": 0.06, "max": 0.1}, "requests_running": {"mean": 1.3}}
    s = summary([step(0, 16, 130, 30)])
    s["steps"][0]["server_replicas"] = {"http://a:1/metrics": hot, "http://b:1/metrics": cold}
    model = build_model(s, [], [])
    md, html = render_markdown(model), render_html(model)
    assert "### Per replica" in md and "| http://a:1/metrics | 0.95/1.00 | 8.0 | 6.7 | 12 |" in md
    assert "http://b:1/metrics" in md and 'id="replicas"' in html
    assert "Per replica" not in render_markdown(build_model(summary([step(0, 16, 130, 30)]), [], []))
