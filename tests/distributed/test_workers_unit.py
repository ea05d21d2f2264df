"""The loss bookkeeping without processes: which workers are named lost, once, with which step;
when a worker gives up on a silent master; which steps are flagged."""

from __future__ import annotations

import locust  # noqa: F401  (gevent patches before anything else)
from locust.runners import STATE_MISSING, STATE_RUNNING, WorkerNode, WorkerNodes

from tokenload.loadgen.phases import StepWindow
from tokenload.loadgen.workers import MasterWatchdog, WorkerLossWatch, step_at
from tokenload.results.summary import _flag_worker_loss

WINDOWS = [StepWindow(0, 2, None, start=100.0, end=110.0), StepWindow(1, 4, None, start=111.0)]


class FakeMaster:
    def __init__(self, *ids: str) -> None:
        self.clients = WorkerNodes()
        for i in ids:
            self.clients[i] = WorkerNode(i, state=STATE_RUNNING)

    def get_worker_index(self, client_id: str) -> int:
        return sorted(self.clients).index(client_id)


def test_step_at_finds_the_open_window() -> None:
    times = (99.0, 100.0, 109.9, 110.5, 111.0, 500.0)
    assert [step_at(WINDOWS, t) for t in times] == [None, 0, 0, None, 1, 1]


def test_a_missing_worker_is_named_once_with_its_last_sign_of_life() -> None:
    now = [108.0]
    runner = FakeMaster("a", "b", "c")
    lost: list[dict] = []
    watch = WorkerLossWatch(runner, lost, lambda: WINDOWS, clock=lambda: now[0])
    watch.on_heartbeat("b", timestamp=106.5)
    watch.on_report("b", {"tokenload": {"records": [{}, {}, {}]}})  # at 108.0
    watch.on_heartbeat("b", timestamp=109.0)
    assert watch.check() == []
    runner.clients["b"].state = STATE_MISSING
    now[0] = 113.0
    [entry] = watch.check()
    assert entry == {
        "worker": "b",
        "worker_index": 1,
        "worker_name": "w1",
        "last_seen_at": 109.0,
        "lost_at": 113.0,
        "step": 0,  # it died in step 0, though found missing in step 1
        "records_reported": 3,
    }
    assert watch.check() == [] and lost == [entry]
    # It comes back (a partition healed): noted, and a later loss is a new entry.
    runner.clients["b"].state = STATE_RUNNING
    now[0] = 114.0
    assert watch.check() == [] and lost[0]["rejoined_at"] == 114.0
    runner.clients["b"].state = STATE_MISSING
    assert len(watch.check()) == 1 and len(lost) == 2


def test_a_worker_never_heard_from_is_lost_when_found() -> None:
    runner = FakeMaster("a")
    runner.clients["a"].state = STATE_MISSING
    lost: list[dict] = []
    [entry] = WorkerLossWatch(runner, lost, lambda: WINDOWS, clock=lambda: 110.5).check()
    assert entry["last_seen_at"] == entry["lost_at"] == 110.5 and entry["step"] is None


def test_the_watchdog_counts_silent_ticks_only_after_the_master_was_heard() -> None:
    quits: list[bool] = []
    dog = MasterWatchdog(lambda: quits.append(True), limit=3)
    assert not any(dog.tick() for _ in range(10))  # not connected yet: never fires
    dog.on_heartbeat(client_id="x", timestamp=1.0)
    assert [dog.tick() for _ in range(3)] == [False, False, False]  # heard, then 2 silent ticks
    dog.on_heartbeat()
    assert [dog.tick() for _ in range(4)] == [False, False, False, True]
    assert dog.silent_ticks == 3


def test_steps_open_during_a_loss_are_flagged() -> None:
    steps = [{"start": 100.0, "end": 110.0, "flags": []}, {"start": 110.0, "end": 120.0, "flags": ["x"]}]
    steps.append({"start": 120.0, "end": 130.0, "flags": []})
    _flag_worker_loss(steps, [{"last_seen_at": 108.0, "lost_at": 112.0}])
    assert [s["flags"] for s in steps] == [["worker_lost"], ["x", "worker_lost"], []]
    _flag_worker_loss(steps[2:], [])
    assert steps[2]["flags"] == []
