"""A locustfile of your own, shipped in a ConfigMap (components/own-locustfiles): tokenload's
chat user as it is; subclass it, or add tasks of your own, as in any Locust file."""

from tokenload.loadgen.user import ChatUser


class MyLLM(ChatUser):
    pass
