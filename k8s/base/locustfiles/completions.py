"""Stream text completions (/v1/completions) from an OpenAI-compatible server.

locust -f locustfiles/completions.py --host http://127.0.0.1:8000 --headless -u 16 -t 60s
"""

from tokenload.loadgen.user import CompletionsUser


class Completions(CompletionsUser):
    pass
