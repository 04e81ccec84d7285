"""Where the user's gpumem-tui files live: ``$GPUMEM_TUI_CONFIG_DIR``, else
``platformdirs.user_config_dir("gpumem-tui")``.

A module of its own so that the dashboard's theme loading (:mod:`gpumem_tui.ui.themes`, on
the start-up path) finds the user's themes folder without compiling the config file's parser
(:mod:`gpumem_tui.ui.config`).
"""

from __future__ import annotations

import os
from pathlib import Path

APP_NAME = "gpumem-tui"
CONFIG_DIR_ENV = "GPUMEM_TUI_CONFIG_DIR"


def user_config_dir() -> Path:
    """The per-user config directory (``$GPUMEM_TUI_CONFIG_DIR`` overrides platformdirs)."""
    override = os.environ.get(CONFIG_DIR_ENV)
    if override:
        return Path(override)
    import platformdirs  # ~5 ms; only needed when no override is set

    return Path(platformdirs.user_config_dir(APP_NAME))
