"""The server processes' collector settings: start-up state frozen, later cycles still collected."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from tui.serve.heap import GC_GEN0_THRESHOLD, settle_heap


class Node:
    """An object in a reference cycle (only the cyclic collector can free it)."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def restored_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


@pytest.mark.usefixtures("restored_gc")
def test_settle_heap_freezes_what_is_alive_and_collects_young_objects_less_often() -> None:
    start_up = Node()
    settle_heap()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold()[0] == GC_GEN0_THRESHOLD
    frozen = weakref.ref(start_up)
    del start_up
    gc.collect()
    assert frozen() is not None  # frozen: no collection walks it, so its cycle outlives its last reference


@pytest.mark.usefixtures("restored_gc")
def test_cycles_made_after_settling_are_still_collected() -> None:
    settle_heap()
    later = weakref.ref(Node())
    gc.collect()
    assert later() is None


@pytest.mark.usefixtures("restored_gc")
def test_settling_again_after_a_reset_collects_the_old_state() -> None:
    old_engine = Node()
    settle_heap()
    old = weakref.ref(old_engine)
    del old_engine  # the reset replaced it
    settle_heap()
    assert old() is None
