"""The reference prompt-length experiment as a Locust shape: one step per prompt length.

    locust -f locustfiles/completions.py,locustfiles/context_sweep.py --host http://127.0.0.1:8000 \
        --headless --prompt-lengths 121,511,2041,8191 --output-tokens 64 --concurrency 1 \
        --step-duration 30

Each step's prompts are exactly that many of the target's tokens (through its /tokenize); at
concurrency 1 TTFT grows with the prompt (prefill) while TPOT barely moves (decode). The published
vLLM 0.6.6 / A40 / Qwen2.5-7B figures it reproduces, TTFT/TPOT ms: 121 -> 37.3/29.07,
511 -> 73.6/28.86, 2041 -> 261.8/28.96, 8191 -> 1736.0/30.70 (tokenload/demo.py has the source).
"""

from tokenload.loadgen.shapes import ContextSweepShape


class ContextSweep(ContextSweepShape):
    pass
