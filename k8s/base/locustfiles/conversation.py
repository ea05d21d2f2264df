"""Multi-turn chats: each turn resends the growing history after a think time; requests are
named "turn N", so the LLM table shows TTFT by turn.

    locust -f locustfiles/conversation.py --host http://127.0.0.1:8000 --headless -u 8 -t 2m \
        --workload locustfiles/workloads/conversation.yaml
"""

from tokenload.loadgen.user import ConversationUser


class Conversation(ConversationUser):
    pass
