"""The chart's text (title, ticks, axis labels, legend) is readable in every theme.

Each theme renders the chart of a probed process; every character of text in the plot and the
legend must either use the terminal's own colours for both foreground and background (ANSI
themes) or have a WCAG contrast ratio of at least 4.5 between its foreground and background
(WCAG 2.1, success criterion 1.4.3, "contrast (minimum)"; relative luminance per its
definition of sRGB). On main before this test, ansi-dark and ansi-light drew it #000000 on
#000000 (ratio 1.0).
"""

from __future__ import annotations

import asyncio

import pytest

import textual  # noqa: F401 -- installed by setup (README): missing is a failure

from rich.color import Color as RichColor  # noqa: E402
from textual.geometry import Region  # noqa: E402

from gpumem_tui.ui.app import GpuMemApp  # noqa: E402
from gpumem_tui.ui.memory_chart import MemoryPlot  # noqa: E402
from gpumem_tui.ui.themes import load_themes  # noqa: E402
from ui_fakes import FakeSource  # noqa: E402
from waiting import settle  # noqa: E402

MIN_CONTRAST = 4.5


def _luminance(color: RichColor) -> float:
    def channel(c: int) -> float:
        c = c / 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = color.get_truecolor()
    return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b)


def contrast(fg: RichColor, bg: RichColor) -> float:
    """WCAG 2.1 contrast ratio (1 to 21)."""
    high, low = sorted((_luminance(fg), _luminance(bg)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def _is_default(color: RichColor | None) -> bool:
    return color is None or color.is_default


def unreadable_text(strips) -> list[str]:
    """Text runs whose colours are not readable, as ``'text' fg on bg (ratio)``."""
    bad = []
    for strip in strips:
        for seg in strip:
            text = seg.text.strip()
            if not any(ch.isalnum() for ch in text) or seg.style is None:
                continue
            fg, bg = seg.style.color, seg.style.bgcolor
            if seg.style.reverse:
                fg, bg = bg, fg
            if _is_default(fg) and _is_default(bg):
                continue  # the terminal's own colours: readable by the user's choice
            if _is_default(fg) or _is_default(bg):
                bad.append(f"{text!r}: one terminal-default colour against an explicit one ({fg} on {bg})")
                continue
            ratio = contrast(fg, bg)
            if ratio < MIN_CONTRAST:
                bad.append(f"{text!r}: {fg.name} on {bg.name} (contrast {ratio:.2f})")
    return bad


def _theme_names() -> list[str]:
    # The app registers its themes when built (GpuMemApp.__init__): no need to run it, which
    # every xdist worker did while collecting this module.
    return sorted(GpuMemApp(FakeSource(), interval=0.05, themes=load_themes(), side_pane=False).available_themes)


THEMES = _theme_names()


def test_every_bundled_and_ansi_theme_is_checked():
    assert {"dark", "light", "ansi-dark", "ansi-light", "textual-dark", "textual-light"} <= set(THEMES)


@pytest.mark.parametrize("theme", THEMES)
def test_chart_text_is_readable(theme):
    async def run() -> tuple[list[str], str]:
        # One poll draws the chart (the first comes right after the first frame); a 0.05 s
        # interval had the app take and draw a dozen more while the test looked.
        app = GpuMemApp(FakeSource(), interval=1.0, themes=load_themes(), side_pane=False, theme=theme)
        async with app.run_test(size=(160, 48)) as pilot:
            app.theme = theme
            await settle(pilot, lambda: app.chart.curves and app.chart.now is not None, what="a drawn chart")
            plot = app.query_one(MemoryPlot)
            plot.refresh()
            await pilot.pause()  # render_lines below draws for the theme now, whenever the refresh lands
            strips = plot.render_lines(Region(0, 0, plot.size.width, plot.size.height))
            legend = app.chart.query_one("#chart-legend")
            strips += legend.render_lines(Region(0, 0, legend.size.width, legend.size.height))
            text = "".join(seg.text for strip in strips for seg in strip)
            return unreadable_text(strips), text

    bad, text = asyncio.run(run())
    assert "PID" in text and "memory (" in text, "the chart was not drawn"
    assert not bad, f"{theme}: " + "; ".join(bad[:5])
