"""What scraping the server costs the master: parse-and-fold time of one vLLM /metrics page (and
of a 10-replica set), and the process's CPU share while scraping 1 and 10 replicas every second.

The page is the real vLLM 0.32 page kept in tests/goldens; the replicas are served from this
process by a small gevent HTTP server (so the CPU share includes serving them: an upper bound).
Targets: < 5 ms per page, < 2 % of a core at a 1 s interval. Prints JSON.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from tokenload.servermetrics.parse import parse_page  # noqa: E402
from tokenload.servermetrics.scraper import Scraper  # noqa: E402
from tokenload.servermetrics.summary import summarize_window  # noqa: E402
from tokenload.serving.http import HTTPServer  # noqa: E402

PAGE = (ROOT / "tests" / "goldens" / "vllm-0.32-cpu-metrics.txt").read_text()


def per_call_ms(fn, n: int = 200) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def cpu_share(replicas: int, seconds: float) -> dict:
    http = HTTPServer("127.0.0.1", 0)
    body = PAGE.encode()
    for i in range(replicas):
        http.route("GET", f"/r{i}/metrics")(
            lambda req, conn: conn.respond(200, body, content_type="text/plain")
        )
    http.start()
    port = http.address[1]
    scraper = Scraper([f"http://127.0.0.1:{port}/r{i}/metrics" for i in range(replicas)], interval_s=1.0)
    proc = psutil.Process()
    scraper.start()
    import gevent

    gevent.sleep(1.5)
    c0, t0 = proc.cpu_times(), time.perf_counter()
    gevent.sleep(seconds)
    c1, t1 = proc.cpu_times(), time.perf_counter()
    scraper.stop()
    http.stop()
    fold_ms = per_call_ms(lambda: summarize_window(scraper.points, 0, float("inf")), n=20)
    return {
        "replicas": replicas,
        "interval_s": 1.0,
        "cpu_share_of_a_core": round(((c1.user + c1.system) - (c0.user + c0.system)) / (t1 - t0), 4),
        "scrapes_ok": sum(p.ok for p in scraper.points),
        "fold_window_ms": round(fold_ms, 3),
    }


def main() -> None:
    quick = "--quick" in sys.argv
    result = {
        "page_lines": len(PAGE.splitlines()),
        "parse_ms_per_page": round(per_call_ms(lambda: parse_page(PAGE)), 3),
        "parse_ms_per_page_prometheus_client": round(
            per_call_ms(lambda: parse_page(PAGE, reference=True), n=50), 3
        ),
        "parse_ms_10_replicas": round(per_call_ms(lambda: [parse_page(PAGE) for _ in range(10)], n=20), 3),
        "scraping": [cpu_share(n, 3.0 if quick else 10.0) for n in (1, 10)],
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
