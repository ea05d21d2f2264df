"""A user that burns CPU before each request: a load generator starved on purpose."""

import time

from tokenload.loadgen.shapes import RateShape
from tokenload.loadgen.user import CompletionsUser


class Starved(CompletionsUser):
    def generate(self) -> None:
        end = time.perf_counter() + 0.03  # 30 ms of CPU that blocks the event loop
        while time.perf_counter() < end:
            pass
        super().generate()


class Rate(RateShape):
    pass
