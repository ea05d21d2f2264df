"""A concurrency staircase: add it to a user locustfile.

    locust -f locustfiles/chat.py,locustfiles/staircase.py --host http://127.0.0.1:8000 --headless \
        --concurrency 1,2,4,8,16,32,64 --step-duration 30 --warmup 0.2

(``tokenload sweep`` does this for you, and writes summary.json.)
"""

from tokenload.loadgen.shapes import StaircaseShape


class Staircase(StaircaseShape):
    pass
