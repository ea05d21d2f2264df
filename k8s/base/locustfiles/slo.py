"""SLO capacity search in open loop: add it to a user locustfile.

    locust -f locustfiles/completions.py,locustfiles/slo.py --host http://127.0.0.1:8000 --headless \
        --slo ttft_p95_ms=500,tpot_p95_ms=50 --slo-start 1 --slo-resolution 0.1 --step-duration 30

Open-loop rate probes (``--arrival``) grow by ``--slo-factor`` while they meet the SLO beyond
sampling noise, then bisect; summary.json's ``search`` holds ``slo_capacity_rps`` and each probe.
"""

from tokenload.loadgen.slo_shape import SLOShape


class SLO(SLOShape):
    pass
