"""The dashboard's per-PID stores (gpumem_tui.ui.poll_record): probe samples, phase marks and
phase peaks are kept for at most MAX_MARK_PIDS PIDs, MAX_MARKS_PER_PID items each; the oldest
PID goes first, and what is kept beside its items (the table's flag, a forecast) goes with it."""

from __future__ import annotations

from collections import OrderedDict

from gpumem_tui.ui.poll_record import MAX_MARK_PIDS, MAX_MARKS_PER_PID, _kept_for


def test_a_store_keeps_the_newest_pids_and_says_which_went():
    store: OrderedDict = OrderedDict()
    evicted: list[int] = []
    for pid in range(MAX_MARK_PIDS + 3):
        _kept_for(store, pid, evicted.append).append(pid)
    assert evicted == [0, 1, 2]
    assert list(store) == list(range(3, MAX_MARK_PIDS + 3))
    kept = _kept_for(store, 3)  # an existing PID: its own deque, nothing evicted
    assert kept is store[3] and list(kept) == [3] and len(store) == MAX_MARK_PIDS
    kept.extend(range(2 * MAX_MARKS_PER_PID))
    assert len(kept) == MAX_MARKS_PER_PID and kept[-1] == 2 * MAX_MARKS_PER_PID - 1
