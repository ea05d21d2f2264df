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
