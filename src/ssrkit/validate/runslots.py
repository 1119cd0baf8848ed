"""Run slots: at most `--jobs` test runs at once, and runs made ahead on slots nothing else wants.

Validation runs an artifact's tests three times in a row (bug, original, bug+weaken). At the end of a round
fewer artifacts are left than there are slots, and the last artifact's runs would go one after another while
a slot stands idle. A run *made ahead* is a later run of an artifact started in a sandbox of its own; it
takes a slot only when one is free, no ordinary run waits for one, and fewer artifacts are being validated
than there are slots. It never delays another artifact's run, and it is wasted only when an earlier check of
its artifact fails, on a slot that nothing else wanted.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Callable, Generic, Iterator, TypeVar

T = TypeVar("T")


class RunSlots:
    """`n` slots for ordinary runs (`run`) and, at lower priority, runs made ahead (`Ahead`)."""

    def __init__(self, n: int) -> None:
        self.n = max(1, int(n))
        self._free = self.n
        self._waiting = 0  # ordinary runs waiting for a slot
        self._artifacts = 0  # artifacts being validated
        self._cv = threading.Condition()

    @contextmanager
    def artifact(self) -> Iterator[None]:
        """While one artifact is validated (runs made ahead wait for fewer artifacts than slots)."""
        with self._cv:
            self._artifacts += 1
        try:
            yield
        finally:
            with self._cv:
                self._artifacts -= 1
                self._cv.notify_all()

    @contextmanager
    def run(self) -> Iterator[None]:
        """Hold a slot for one ordinary run, waiting for one if need be."""
        with self._cv:
            self._waiting += 1
            try:
                while self._free == 0:
                    self._cv.wait()
            finally:
                self._waiting -= 1
            self._free -= 1
        try:
            yield
        finally:
            self.release()

    def take_idle(self, cancelled: threading.Event) -> bool:
        """Wait for an idle slot and take it (True), or for `cancelled` (False)."""
        with self._cv:
            while not cancelled.is_set():
                if self._free and not self._waiting and self._artifacts < self.n:
                    self._free -= 1
                    return True
                self._cv.wait()
            return False

    def release(self) -> None:
        with self._cv:
            self._free += 1
            self._cv.notify_all()

    def wake(self) -> None:
        """Make waiting runs look again (one was cancelled)."""
        with self._cv:
            self._cv.notify_all()

    @property
    def idle(self) -> int:
        """Slots free now (for tests and progress)."""
        with self._cv:
            return self._free


class Ahead(Generic[T]):
    """One run made ahead: `make()` runs on an idle slot of `slots` when one comes; `claim()` takes its result
    when the run started (waiting for it to end), or cancels it and returns None when it had not.

    Its thread is a daemon: a run nobody claims never keeps the process from exiting (its sandbox is closed
    by the exit cleanup like any other)."""

    def __init__(self, slots: RunSlots, make: Callable[[], T]) -> None:
        self._slots = slots
        self._make = make
        self._cancel = threading.Event()
        self._lock = threading.Lock()
        self._started = False
        self._future: Future = Future()
        threading.Thread(target=self._work, name="ssrkit-ahead", daemon=True).start()

    def _work(self) -> None:
        if not self._slots.take_idle(self._cancel):
            self._future.set_result(None)
            return
        with self._lock:
            if self._cancel.is_set():  # claimed between the slot and here: not wanted any more
                self._slots.release()
                self._future.set_result(None)
                return
            self._started = True
        try:
            self._future.set_result(self._make())
        except BaseException as e:  # noqa: BLE001 - handed to whoever claims the run
            self._future.set_exception(e)
        finally:
            self._slots.release()

    def claim(self) -> T | None:
        """The run's result if it started (raising what it raised), else None (and it never will start)."""
        with self._lock:
            if not self._started:
                self._cancel.set()
        if self._cancel.is_set():
            self._slots.wake()
            self._future.result()  # returns at once: the worker sees the cancel
            return None
        return self._future.result()

    def drop(self) -> None:
        """Not wanted: cancel it if it has not started, else let it end on its own (its result and errors
        are dropped; nothing waits for it, so an interrupted validation never waits for a run's timeout)."""
        with self._lock:
            if not self._started:
                self._cancel.set()
        self._slots.wake()
