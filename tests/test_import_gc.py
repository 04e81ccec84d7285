"""support/import_gc.import_out_of_collector: the imports of torch and transformers in the
processes that load them (``measure``, the demo job) run with the collector paused, and what
they made is frozen afterwards; nothing happens when every module is there already."""

from __future__ import annotations

import gc
import sys

import pytest

from gpumem_tui.support.import_gc import import_out_of_collector

MODULE = "gpumem_probe_import_gc_target"


def test_a_missing_module_is_imported_with_the_collector_paused_then_frozen(tmp_path, monkeypatch):
    # the module writes down whether automatic collection was on while it was being imported
    (tmp_path / f"{MODULE}.py").write_text("import gc\nCOLLECTING = gc.isenabled()\nMADE = [[] for _ in range(100)]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    was = gc.isenabled()
    try:
        gc.enable()
        frozen = gc.get_freeze_count()
        import_out_of_collector("sys", MODULE)
        module = sys.modules[MODULE]
        assert module.COLLECTING is False
        assert gc.isenabled()
        assert gc.get_freeze_count() >= frozen + len(module.MADE)
        # all there: no pass paused, nothing frozen
        frozen = gc.get_freeze_count()
        import_out_of_collector(MODULE, "sys")
        assert gc.get_freeze_count() == frozen
    finally:
        sys.modules.pop(MODULE, None)
        (gc.enable if was else gc.disable)()


def test_a_module_that_is_not_installed_is_named_and_the_collector_is_back(monkeypatch):
    was = gc.isenabled()
    try:
        gc.enable()
        with pytest.raises(ModuleNotFoundError) as missing:
            import_out_of_collector("gpumem_no_such_module_here")
        assert missing.value.name == "gpumem_no_such_module_here"  # what measure's one-line error reads
        assert gc.isenabled()
        # None in sys.modules (a test hiding torch) is not "imported already": it raises as import does
        monkeypatch.setitem(sys.modules, MODULE, None)
        with pytest.raises(ImportError):
            import_out_of_collector(MODULE)
        assert gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()
