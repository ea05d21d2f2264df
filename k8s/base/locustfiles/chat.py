"""Stream chat completions from an OpenAI-compatible server (vLLM first).

    locust -f locustfiles/chat.py --host http://127.0.0.1:8000 --headless -u 16 -t 60s \
        --prompt-tokens 512 --output-tokens 128
"""

from tokenload.loadgen.user import ChatUser


class Chat(ChatUser):
    pass
