"""The run's in-flight bookkeeping (loadgen/fleet.py): what the master waits for before it
judges a step, fed as the workers' reports feed it."""

from __future__ import annotations

from tokenload.loadgen.fleet import Fleet


def test_a_step_is_unfinished_until_every_live_process_reports_its_requests_ended() -> None:
    master, worker = Fleet(), Fleet()
    worker.started(3)  # measured part of step 3
    worker.started(None)  # a warm-up request
    master.expect_reports(["w0", "w1"])
    master.note_report("w0", worker.live_report())
    assert master.awaiting_reports == {"w1"} and master.workers_seen == {"w0"}
    assert master.unfinished(3, {"w0", "w1"}) == 1
    assert master.in_flight_total({"w0", "w1"}) == 2
    # A lost worker's requests are never coming: only live workers count.
    assert master.unfinished(3, {"w1"}) == 0 and master.in_flight_total(set()) == 0
    worker.ended(3)
    master.note_report("w0", worker.live_report())
    assert master.unfinished(3, {"w0"}) == 0 and master.in_flight_total({"w0"}) == 1
    assert worker.measured_in_flight == {}  # no zero entries left behind


def test_this_process_counts_its_own_requests_with_the_workers() -> None:
    fleet = Fleet()
    fleet.started(1)
    fleet.started(1)
    fleet.note_report("w0", {"in_flight": 4, "measured_in_flight": [[1, 3], [2, 1]]})
    assert fleet.unfinished(1, {"w0"}) == 5 and fleet.unfinished(2, {"w0"}) == 1
    assert fleet.in_flight_total({"w0"}) == 6
    fleet.ended(1)
    assert fleet.measured_in_flight == {1: 1} and fleet.in_flight == 1


class _Stream:
    def __init__(self) -> None:
        self.chunk_tokens = 0


def test_arrived_tokens_count_streams_in_progress_and_never_go_back() -> None:
    fleet, a, b = Fleet(), _Stream(), _Stream()
    fleet.started(1, a)
    fleet.started(None, b)
    a.chunk_tokens, b.chunk_tokens = 40, 5
    assert fleet.arrived_tokens() == 45  # before either ended
    fleet.ended(1, a)
    a.chunk_tokens = 1000  # a state read after it ended is not counted again
    assert fleet.arrived_tokens() == 45 and fleet.streams == {b}
    b.chunk_tokens = 9
    fleet.ended(None, b)  # a failed or cancelled stream's tokens did arrive
    assert fleet.arrived_tokens() == 49 and fleet.ended_tokens == 49
    fleet.ended(None, b)  # ended twice (never by LLMUser.send): counted once
    assert fleet.arrived_tokens() == 49


def test_a_master_sums_its_workers_arrived_tokens_lost_ones_included() -> None:
    master, w0, w1 = Fleet(), Fleet(), Fleet()
    s0, s1 = _Stream(), _Stream()
    w0.started(None, s0)
    w1.started(None, s1)
    s0.chunk_tokens, s1.chunk_tokens = 10, 20
    master.note_report("w0", w0.live_report())
    master.note_report("w1", w1.live_report())
    assert master.arrived_tokens_total() == 30
    s0.chunk_tokens = 25
    master.note_report("w0", w0.live_report())
    assert master.arrived_tokens_total() == 45  # w1 stopped reporting (lost): its 20 stay
    master.note_report("w2", {"in_flight": 0})  # a report without the count adds nothing
    assert master.arrived_tokens_total() == 45
