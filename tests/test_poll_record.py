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


class _ManyPidsSource:
    """One snapshot naming more PIDs than the stores keep, in its probe samples, phase marks
    and phase peaks (a hostile or huge trace): the last MAX_MARK_PIDS of each are kept."""

    PIDS = range(5000, 5000 + MAX_MARK_PIDS + 5)

    def poll(self):
        from gpumem_tui.telemetry.model import Phase, PhaseMark, PhasePeak, ProbeSample, Snapshot

        now = 1000.0
        return Snapshot(
            time=now,
            probes=tuple(ProbeSample(now, pid, "cuda:0", allocated_bytes=1 << 30) for pid in self.PIDS),
            phase_marks=tuple(PhaseMark(now, pid, Phase.FORWARD, 1) for pid in self.PIDS),
            phase_peaks=tuple(PhasePeak(pid=pid, step=1, phase=Phase.BACKWARD, start=now - 1, end=now,
                                        peak_bytes=2 << 30, device="cuda") for pid in self.PIDS))

    def close(self) -> None:
        """Nothing to release: the source holds no file, thread or handle."""


async def test_a_snapshot_naming_more_pids_than_kept_keeps_the_newest_and_the_dashboard_runs():
    # Found by a hostile trace: a snapshot whose phase peaks named more PIDs than kept dropped
    # the first ones while it was read, then looked them up (KeyError: the dashboard stopped).
    from gpumem_tui.ui.app import GpuMemApp
    from waiting import settle

    app = GpuMemApp(_ManyPidsSource(), interval=0.5, side_pane=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, lambda: app.snapshot is not None, what="the first snapshot")
        newest = list(_ManyPidsSource.PIDS)[-MAX_MARK_PIDS:]
        assert list(app.phase_peaks) == newest and set(app.outlooks) <= set(newest)
        assert list(app.phase_marks) == newest and list(app.probe_samples) == newest
    assert app.crash_line is None
