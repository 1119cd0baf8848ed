"""Run slots: a run made ahead takes only a slot that nothing else wants, and is cancelled when claimed first."""

from __future__ import annotations

import threading
import time

import pytest

from ssrkit.validate.runslots import Ahead, RunSlots

pytestmark = pytest.mark.fast


def _wait_for(cond, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.005)
    return cond()


def test_a_run_made_ahead_waits_while_as_many_artifacts_as_slots_are_validated():
    slots = RunSlots(2)
    ran = threading.Event()
    with slots.artifact(), slots.artifact():
        ahead = Ahead(slots, ran.set)
        time.sleep(0.05)
        assert not ran.is_set() and slots.idle == 2  # two artifacts, two slots: no slot is idle for long
        assert ahead.claim() is None  # claimed before it started: cancelled, run inline instead
    time.sleep(0.05)
    assert not ran.is_set() and slots.idle == 2


def test_a_run_made_ahead_takes_an_idle_slot_at_the_end_of_a_round():
    slots = RunSlots(2)
    with slots.artifact():
        with slots.run():
            ahead = Ahead(slots, lambda: "made")
            assert _wait_for(lambda: ahead._started)
        assert ahead.claim() == "made"
    assert slots.idle == 2


def test_an_ordinary_run_waiting_for_a_slot_goes_first():
    slots = RunSlots(2)
    order: list[str] = []
    first, second = threading.Event(), threading.Event()
    with slots.artifact():
        hold = [slots.run(), slots.run()]
        for h in hold:
            h.__enter__()

        def ordinary():
            with slots.run():
                order.append("ordinary")
                second.wait(5)

        t = threading.Thread(target=ordinary)
        t.start()
        assert _wait_for(lambda: slots._waiting == 1)
        ahead = Ahead(slots, lambda: order.append("ahead") or "made")
        hold[0].__exit__(None, None, None)  # one slot frees: the waiting ordinary run takes it
        assert _wait_for(lambda: order == ["ordinary"])
        time.sleep(0.05)
        assert order == ["ordinary"]
        hold[1].__exit__(None, None, None)  # the next one is idle: the run made ahead takes it
        assert _wait_for(lambda: order == ["ordinary", "ahead"])
        assert ahead.claim() == "made"
        second.set()
        t.join(5)
    assert slots.idle == 2


def test_an_error_of_a_run_made_ahead_reaches_its_claim_and_drop_swallows_it():
    slots = RunSlots(2)

    def boom():
        raise RuntimeError("no sandbox")

    with slots.artifact():
        ahead = Ahead(slots, boom)
        assert _wait_for(lambda: ahead._future.done())
        try:
            ahead.claim()
        except RuntimeError as e:
            assert "no sandbox" in str(e)
        else:
            raise AssertionError("the error was lost")
        Ahead(slots, boom).drop()
    assert _wait_for(lambda: slots.idle == 2)


def test_dropping_a_run_that_started_does_not_wait_for_it():
    slots = RunSlots(2)
    release = threading.Event()
    with slots.artifact():
        ahead = Ahead(slots, lambda: release.wait(10))
        assert _wait_for(lambda: ahead._started)
        t = time.monotonic()
        ahead.drop()
        assert time.monotonic() - t < 1
        assert slots.idle == 1  # it still holds its slot until it ends
        release.set()
    assert _wait_for(lambda: slots.idle == 2)
