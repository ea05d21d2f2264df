"""Adaptive knee search: add it to a user locustfile.

    locust -f locustfiles/completions.py,locustfiles/knee.py --host http://127.0.0.1:8000 --headless \
        --knee-start 1 --knee-factor 4 --knee-resolution 1.5 --step-duration 30

Short probe steps climb geometrically until a step saturates, then full steps bisect between the
last unsaturated and the first saturated concurrency; summary.json's ``search`` says what it found.
"""

from tokenload.loadgen.shapes import KneeShape


class Knee(KneeShape):
    pass
