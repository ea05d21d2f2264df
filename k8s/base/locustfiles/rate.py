"""Open-loop request-rate steps: add it to a user locustfile.

    locust -f locustfiles/completions.py,locustfiles/rate.py --host http://127.0.0.1:8000 --headless \
        --rate 1,2,4,8 --arrival poisson --step-duration 30 --max-in-flight 512

Each step sends ``--rate`` requests/s on one global schedule (``constant``, ``poisson`` or
``gamma:B``) split exactly across the workers; a request sent late is timed from when it was
due (its send lag is in its TTFT and E2E, and reported beside them).
"""

from tokenload.loadgen.shapes import RateShape


class Rate(RateShape):
    pass
