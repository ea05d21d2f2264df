"""What repeating an indeterminate probe buys and costs, in the SLO search's unit model: for
``--slo-repeats`` 0, 1 and 2, the share of searches whose answer lands within 10 % of the true
highest SLO-meeting rate, and the modelled load time (each probe's planned duration plus 3 s
between probes), over many seeds. Prints JSON.

The model is tests/analysis/slo_model.py's, the one tests/analysis/test_slo_search.py uses: TTFTs
lognormal (sigma 0.6, CV ~0.66) around a median that blows up as the rate nears a 40 req/s server
(M/M/1-like), an SLO of ttft_p95_ms=300 (true answer 22.1 req/s), probes judged by the search's
own code. It has no warm-up, drain or
request lifetimes, so its times are shorter than a real run's; the ratios between settings are
what it shows. The real side by side is bench/slo_search.py.

    python bench/slo_repeats.py [--seeds 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.analysis.slo_model import CAPACITY, TRUE_RATE, simulate_search  # noqa: E402
from tokenload.analysis.slo_search import SearchPlan  # noqa: E402

#: Seconds between probes in the model (a real run's settle, drain and ramp are 3-5 s a probe).
GAP_S = 3.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=200)
    args = ap.parse_args()
    rows = {}
    for repeats in (0, 1, 2):
        plan = SearchPlan(start=2.0, factor=2.0, max_rate=256.0, resolution=0.1, repeats=repeats)
        times, ratios = [], []
        for seed in range(args.seeds):
            result, probes = simulate_search(seed, CAPACITY, plan)
            times.append(sum(p.duration_s + GAP_S for p in probes))
            ratios.append(result["slo_capacity_rps"] / TRUE_RATE)
        rows[repeats] = {
            "within_10_percent": round(sum(0.9 <= r <= 1.1 for r in ratios) / len(ratios), 3),
            "below_90_percent": sum(r < 0.9 for r in ratios),
            "above_110_percent": sum(r > 1.1 for r in ratios),
            "load_time_s_median": statistics.median(times),
            "load_time_s_mean": round(statistics.mean(times), 1),
        }
    print(json.dumps({"bench": "slo_repeats", "seeds": args.seeds, "by_repeats": rows}, indent=2))


if __name__ == "__main__":
    main()
