"""Per-family accuracy of ``estimate --device cpu`` against ``measure`` (issue 10 targets).

Reads ``benchmarks/data/measured_families.json`` (``benchmarks/collect_families.py``) and
prints every case and, per family, the median and worst |error| of the peak, with the
description the estimate used (exact, or general and unverified). Targets: exact families
within 1 % median and 2 % worst; families read with the general description within 10 %.

    .venv/bin/python benchmarks/estimator_families.py [--cases]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from estimator_accuracy import compare, predict  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "measured_families.json"


def family_rows(data_path: Path = DATA) -> dict[str, dict]:
    """{family label: {"description", "verified", "errors": [(case id, error %)]}}."""
    from gpumem_tui.estimator.architecture import load_architecture

    rows: dict[str, dict] = {}
    for case in json.loads(data_path.read_text(encoding="utf-8"))["cases"]:
        arch = load_architecture(str(ROOT / case["config"]))
        row = rows.setdefault(arch.model_type, {"description": arch.family.name, "verified": arch.family.verified,
                                                "errors": []})
        row["errors"].append((case["id"], compare(case, predict(case))["error_pct"]))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--cases", action="store_true", help="print every case too")
    args = parser.parse_args(argv)
    rows = family_rows(args.data)
    print(f"{'model_type':<14} {'description':<52} {'cases':>5} {'median':>8} {'worst':>8}  target")
    for mt, row in sorted(rows.items()):
        errs = [abs(e) for _, e in row["errors"]]
        med, worst = statistics.median(errs), max(errs)
        if row["verified"]:
            target, met = "1 % / 2 %", med <= 1.0 and worst <= 2.0
        else:
            target, met = "10 %", worst <= 10.0
        label = row["description"] + ("" if row["verified"] else " (unverified)")
        print(f"{mt:<14} {label:<52} {len(errs):>5} {med:>7.2f}% {worst:>7.2f}%  {target}: {'met' if met else 'NOT met'}")
        if args.cases:
            for cid, e in row["errors"]:
                print(f"    {cid:<52} {e:+7.2f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
