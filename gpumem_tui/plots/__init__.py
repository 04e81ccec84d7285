"""Terminal plots printed by the CLI (``estimate --plot``, ``compare --plot``), drawn with plotext.

The live chart of the dashboard is the project's own braille chart (``ui/memory_chart.py``);
these plots are for a plain terminal over SSH, a CI log or a Slurm output file: plain text
whose width comes from the terminal or ``--width``, without colour when stdout is not a
terminal. Only the modules that draw (:mod:`.canvas` and the plots built on it) import
plotext, and the CLI imports them only when ``--plot`` is given; :mod:`.options` (the flags)
imports no plotting library.
"""
