"""Trace replay: add it to a user locustfile.

    locust -f locustfiles/completions.py,locustfiles/trace.py --host http://127.0.0.1:8000 --headless \
        --trace mooncake_trace.jsonl --trace-speed 2 --trace-window 0:600

Each row of the trace is sent at its time (split exactly across the workers) with its input and
output lengths; rows sharing ``hash_ids`` share those prompt blocks. summary.json's ``trace``
holds the trace's own statistics; the report sets them next to what was sent and what the
server saw.
"""

from tokenload.loadgen.trace_replay import TraceShape


class Trace(TraceShape):
    pass
