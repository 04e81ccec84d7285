"""The process table's sort reads a column's attribute in C (Column.sort_attr): it must order
exactly as the column's own sort key, ties by (PID, GPU index), unknown values last."""

from __future__ import annotations

import random
from operator import attrgetter

from gpumem_tui.telemetry.model import ProcessSample, ProcessType
from gpumem_tui.ui.process_rows import sort_processes
from gpumem_tui.ui.process_columns import COLUMNS

NOW = 1_700_000_000.0


def _reference(processes, column, reverse):  # noqa: ANN001, ANN202 -- the rule, spelled out
    col = next(c for c in COLUMNS if c.key == column)
    known = [p for p in processes if col.sort_key(p, NOW) is not None]
    known.sort(key=lambda p: (p.pid, -1 if p.device_index is None else p.device_index))
    known.sort(key=lambda p: col.sort_key(p, NOW), reverse=reverse)
    return known + sorted((p for p in processes if col.sort_key(p, NOW) is None), key=lambda p: p.pid)


def _processes(rng: random.Random, with_gpu_none: bool) -> list[ProcessSample]:
    out = []
    for _ in range(60):
        pid = rng.randrange(100, 130)  # repeated PIDs: one process on several GPUs
        gpu = None if with_gpu_none and rng.random() < 0.2 else rng.randrange(3)
        out.append(ProcessSample(
            pid, gpu, rng.choice(list(ProcessType)), rng.choice([None, rng.randrange(4) << 30]),
            rng.choice([None, float(rng.randrange(3))]), rng.choice([None, "alice", "bob"]),
            rng.choice(["a", "b", "c"]), float(rng.randrange(3)), rng.randrange(3) << 20,
            rng.choice([None, NOW - rng.randrange(3)]), container=rng.choice([None, "c1", "c2"])))
    return out


def test_every_column_sorts_as_its_sort_key_both_ways_with_and_without_gpu_index():
    rng = random.Random(3)
    for with_gpu_none in (False, True):
        processes = _processes(rng, with_gpu_none)
        for col in COLUMNS:
            if col.sort_attr is not None:  # the attribute read in C is the sort key's value
                assert [attrgetter(col.sort_attr)(p) for p in processes] == [col.sort_key(p, NOW) for p in processes]
            for reverse in (False, True):
                got = sort_processes(processes, col.key, reverse, NOW)
                assert [id(p) for p in got] == [id(p) for p in _reference(processes, col.key, reverse)], col.key
                limited = sort_processes(processes, col.key, reverse, NOW, limit=7)
                assert [id(p) for p in limited] == [id(p) for p in got[:7]], col.key
