"""Memory-over-time chart (drawn in braille cells, :mod:`gpumem_tui.ui.braille`) with the
estimator overlay.

What it draws, all in one unit (MiB, or GiB when the largest value is >= 2 GiB; the axis
label says which), against time in seconds relative to the newest sample (0 = now):

- the measured curves given to :meth:`MemoryChart.set_series` (e.g. NVML used memory of a GPU
  or process, or the probe's torch allocated / reserved bytes; the label says which figure);
- the GPU's total memory as a horizontal line (:meth:`set_total`); when it is more than
  ``chart_samples.TOTAL_SCALE_LIMIT`` times the largest curve or band value it would flatten them, so it is
  then only named in the legend (``fit_total`` forces it onto the scale);
- the predicted bands (:meth:`set_bands`): cumulative horizontal lines (parameters;
  + gradients; + optimizer states; ...), each in its theme colour, shown or hidden with
  :attr:`show_bands`;
- phase marks (:meth:`set_phase_marks`): the measured curve is coloured by the training phase
  it was in (init / forward / backward / optimizer step), and when few marks are visible each
  phase start also gets a vertical line. The legend (two lines under the plot, not a legend
  box over the data) names every colour, with each band's and the total's size;
- the probe's per-phase high-water marks (:meth:`set_phase_peaks`) as a step-shaped envelope
  over the sampled curve, each step of it coloured by its phase (drawn with block quadrants,
  the samples with braille dots, and the legend says so): a peak shorter than the sampling
  interval still shows, at its true height.

Colours are theme variables (``band-*``, ``curve-*``, ``line-total``, ``phase-*``) resolved
through the running app, so a theme restyles the chart.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import zip_longest
from typing import NamedTuple

from rich.cells import cell_len
from rich.text import Text
from textual.app import ComposeResult
from textual.color import Color, ColorParseError
from textual.containers import Vertical
from textual.filter import ANSIToTruecolor, LineFilter
from textual.geometry import Region, Size
from textual.reactive import reactive
from textual.widgets import Static
from rich.color import Color as RichColor
from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip
from textual.widget import Widget

from gpumem_tui.telemetry.model import Phase, PhaseMark, PhasePeak
from gpumem_tui.ui.plain_lines import KeptLines, KeptStatic, PlainStylesCache


class CurveSpec(NamedTuple):
    """One measured curve: legend label, points (epoch seconds, bytes), theme colour variable.

    A NamedTuple, not a frozen dataclass: equally immutable, and its class is made without the
    six methods a frozen dataclass compiles from source at import (~3 M instructions of the
    dashboard's start-up)."""

    label: str
    points: Sequence[tuple[float, float]]
    color_var: str = "curve-measured"


Band = tuple[str, int, str]  # (label, cumulative bytes, theme colour variable)


def _terminal_colours(value: str | None) -> bool:
    """True when a theme colour is the terminal's own (ANSI themes: ``ansi_default``,
    ``transparent``): it has no RGB value to draw with."""
    if not value:
        return True
    try:
        colour = Color.parse(value)
    except ColorParseError:
        return True
    return colour.ansi is not None or colour.a == 0


MIN_TEXT_CONTRAST = 4.5  # WCAG 2.1 AA for normal text (success criterion 1.4.3)


def contrast_ratio(a: tuple[int, int, int], b: tuple[int, int, int]) -> float:
    """WCAG 2.1 contrast ratio of two sRGB colours, 1 (none) to 21 (black on white); the
    relative luminance is WCAG's definition (sRGB channels linearised, weights 0.2126,
    0.7152, 0.0722)."""

    def luminance(rgb: tuple[int, int, int]) -> float:
        lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in (v / 255 for v in rgb)]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def readable_colours(surface: tuple[int, int, int], background: tuple[int, int, int],
                     foreground: tuple[int, int, int]) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(canvas, text) colours for the plot: the theme's foreground on its surface, or on its
    background, whichever first reaches :data:`MIN_TEXT_CONTRAST`; else black or white text
    (the one with more contrast) on the surface."""
    for canvas in (surface, background):
        if contrast_ratio(canvas, foreground) >= MIN_TEXT_CONTRAST:
            return canvas, foreground
    black, white = (0, 0, 0), (255, 255, 255)
    return surface, max((black, white), key=lambda c: contrast_ratio(surface, c))


class MemoryPlot(Widget):
    """The plot area, drawn with :class:`gpumem_tui.ui.braille.Canvas`; the owning
    :class:`MemoryChart` gives it plot commands (:meth:`draw`).

    Commands (name, args, kwargs), in drawing order: ``plot`` (xs, ys; color an RGB tuple or
    "default", marker "braille", "hd" for block quadrants or one character such as "━"),
    ``vline`` (x; color), ``title``, ``xlabel``, ``ylabel`` (text), ``xlim`` / ``ylim``
    (low, high), ``xticks`` / ``yticks`` (values, labels). Layout: title, a frame with y tick
    labels on its left and x tick labels under it, then the y and x axis labels on one line.

    Colours: text and frame in the theme's foreground on its surface (or background), as
    :func:`readable_colours` picks them; an ANSI theme (``ansi-dark``, ``ansi-light``) has
    the terminal's own colours there, which parse as RGB black, so the plot then leaves text
    and canvas in the terminal's default colours (they were drawn black on black).
    """

    DEFAULT_CSS = """
    MemoryPlot { height: 1fr; width: 1fr; }
    """

    def __init__(self, *, id: str | None = None, ops: Sequence[tuple[str, tuple, dict]] = ()) -> None:  # noqa: A002
        super().__init__(id=id)
        self._styles_cache = PlainStylesCache()  # its lines skip Textual's box styling (none is set)
        self._ops: list[tuple[str, tuple, dict]] = list(ops)  # the commands to draw (see draw)
        self._lines: list[Strip] | None = None
        self._built_for: tuple | None = None
        self._painting: list[Strip] | None = None  # the rows of the paint under way
        self._base_style: tuple[tuple[str | None, ...], Style] | None = None  # (theme colours, base_style)

    def _uses_terminal_colours(self) -> bool:
        variables = self.app.theme_variables
        return _terminal_colours(variables.get("surface")) or _terminal_colours(variables.get("foreground"))

    def base_style(self) -> Style:
        """Canvas and text style of the current theme (see the class docstring), one object
        per theme colours: rows compare their styles by identity (:meth:`draw`)."""
        variables = self.app.theme_variables
        key = tuple(variables.get(name) for name in ("surface", "background", "foreground"))
        if self._base_style is not None and self._base_style[0] == key:
            return self._base_style[1]
        if self._uses_terminal_colours():
            style = Style()
        else:
            rgb = [Color.parse(value or "#000000").rgb for value in key]
            canvas, text = readable_colours(*rgb)
            style = Style(color=RichColor.from_rgb(*text), bgcolor=RichColor.from_rgb(*canvas))
        self._base_style = (key, style)
        return style

    def draw(self, ops: list[tuple[str, tuple, dict]], size: Size | None = None) -> None:
        """Replace the plot commands and repaint the rows that changed. ``size``: the plot's
        size as the caller just read it (Widget.size walks to the screen's map each time).

        Once the plot has been drawn at its current size, the new rows are drawn here and
        compared with the shown ones: only the rows that differ are refreshed (a frame
        re-renders and re-composites every dirty line; the title, frame and axis rows seldom
        change when the curve moves). Before that, the whole plot is refreshed."""
        width, height = self.size if size is None else size
        if ops == self._ops and self._lines is not None and self._built_for == (width, height, self.app.theme):
            return  # drawn already: the same commands at this size and theme
        self._ops = list(ops)
        old, built_for = self._lines, self._built_for
        self._lines = None
        if old is None or not width or not height or built_for != (width, height, self.app.theme):
            self.refresh()
            return
        lines = self._build(width, height, old)
        # a row drawn the same is the shown strip itself (render_plot's previous)
        changed = [Region(0, y, width, 1) for y, (before, after) in enumerate(zip(old, lines)) if before is not after]
        if len(old) != len(lines):
            self.refresh()
        elif changed:
            self.refresh(*changed)

    def _build(self, width: int, height: int, shown: Sequence[Strip] = ()) -> list[Strip]:
        """Draw the rows for a ``width`` x ``height`` plot (cells) and keep them; a row equal
        to the one at its place in ``shown`` (drawn at this size and theme) is kept."""
        self._lines = render_plot(self._ops, width, height, self.base_style(), shown)
        self._built_for = (width, height, self.app.theme)
        return self._lines

    def _current_lines(self) -> list[Strip]:
        """The rows for the plot's size and theme now, drawn again if either changed."""
        width, height = self.size
        if self._lines is None or self._built_for != (width, height, self.app.theme):
            return self._build(width, height)
        return self._lines

    def get_line_filters(self) -> Sequence[LineFilter]:
        """The app's line filters less ANSIToTruecolor, a no-op here: it converts colours without
        an RGB triplet and dim text (textual/filter.py); the plot draws RGB or no colours, never
        dim. It copied ~20 new rows of ~15 segments per redraw."""
        filters = super().get_line_filters()
        return [line_filter for line_filter in filters if not isinstance(line_filter, ANSIToTruecolor)]

    def render_lines(self, crop: Region) -> list[Strip]:
        # The size is looked up once per paint here, not once per row in render_line.
        self._painting = self._current_lines()
        try:
            return super().render_lines(crop)
        finally:
            self._painting = None

    def render_line(self, y: int) -> Strip:
        lines = self._painting if self._painting is not None else self._current_lines()
        if 0 <= y < len(lines):
            return lines[y]
        return Strip.blank(self.size.width, self.base_style())

    def plain_lines(self) -> list[str]:
        """The plot as plain text lines (tests)."""
        return [line.text for line in self._current_lines()]


def _style(color: object) -> Style | None:
    if isinstance(color, tuple) and len(color) == 3:
        return Style(color=RichColor.from_rgb(*color))
    return None


def _centre(text: str, width: int) -> str:
    text = text[:width]
    left = (width - len(text)) // 2
    return " " * left + text + " " * (width - len(text) - left)


def _read_ops(ops: Sequence[tuple[str, tuple, dict]]) -> tuple[dict[str, tuple], list, list]:
    """The plot commands sorted out: (settings by name, curves, vertical lines)."""
    spec: dict[str, tuple] = {}
    curves: list[tuple[Sequence[float], Sequence[float], Style | None, str]] = []
    vlines: list[tuple[float, Style | None]] = []
    for name, args, kwargs in ops:
        if name == "plot":
            curves.append((args[0], args[1], _style(kwargs.get("color")), str(kwargs.get("marker", "braille"))))
        elif name == "vline":
            vlines.append((args[0], _style(kwargs.get("color"))))
        else:
            spec[name] = args
    return spec, curves, vlines


def _x_tick_labels(tick_cols: dict[int, str], plot_w: int) -> str:
    """The line of x tick labels, each centred under its tick; one that would touch the
    previous label is left out."""
    labels = [" "] * (plot_w + 2)
    last_end = -1
    for col, label in sorted(tick_cols.items()):
        start = col + 1 - len(label) // 2
        start = min(max(start, 0), len(labels) - len(label))
        if start <= last_end:  # would touch the previous label: leave it out
            continue
        labels[start:start + len(label)] = list(label)
        last_end = start + len(label)
    return "".join(labels)


def strip(segments: list[Segment], width: int, base: Style | None,
          measure: Callable[[str], int] = cell_len) -> Strip:
    """A Strip of exactly ``width`` cells from ``segments`` (cut or padded in ``base``).

    The row is measured once, as one string (``measure``: ``rich.cells.cell_len`` or one as
    exact), not segment by segment as Strip would: a plot row has a segment per colour run,
    and measuring them was a third of drawing the plot."""
    length = measure("".join([segment.text for segment in segments]))
    line = Strip(segments, length)
    return line if length == width else line.adjust_cell_length(width, base)


def render_plot(ops: Sequence[tuple[str, tuple, dict]], width: int, height: int, base: Style,
                previous: Sequence[Strip] = ()) -> list[Strip]:
    """The plot commands (see :class:`MemoryPlot`) as ``height`` strips of ``width`` cells.

    A row with the same segments as the strip at its place in ``previous`` (the rows shown)
    is that strip: no new strip (each builds seven caches in Textual 8) nor measure for it,
    and the plot finds it unchanged by identity."""
    width, height = max(int(width), 1), max(int(height), 1)
    spec, curves, vlines = _read_ops(ops)
    title = str(spec.get("title", ("",))[0])
    rows: list[list[Segment]] = []
    compact = height < 7  # too short for a title and an axis-label line
    if not compact:
        rows.append([Segment(_centre(title, width), base)])
    xlo, xhi = spec.get("xlim", (-1.0, 0.0))
    ylo, yhi = spec.get("ylim", (0.0, 1.0))
    if not (xhi > xlo):
        xhi = xlo + 1.0
    if not (yhi > ylo):
        yhi = ylo + 1.0
    yvals, ylabels = spec.get("yticks", ((), ()))
    xvals, xlabels = spec.get("xticks", ((), ()))
    margin = max([len(str(label)) for label in ylabels] + [1])
    plot_w = max(width - margin - 2, 1)
    plot_h = max(height - (3 if compact else 5), 1)
    # The empty chart (the first frame's) has no dot nor tick: its rows are blank without a
    # canvas, and the braille module (canvas, positions) is compiled only once there is something.
    canvas = None
    blank = " " * plot_w  # an empty canvas row: one segment with its tick label and frame, as Canvas.rows gives it
    measure = cell_len
    if curves or vlines or yvals or xvals:
        from gpumem_tui.ui.braille import Canvas, cell_length, draw_curves, x_position, y_position

        measure = cell_length  # quicker for rows of braille
    if curves or vlines:
        canvas = Canvas(plot_w, plot_h)
        draw_curves(canvas, curves, vlines, (xlo, xhi), (ylo, yhi), plot_w, plot_h)
    tick_rows = {}
    for value, label in zip(yvals, ylabels):
        row = round(y_position(value, ylo, yhi, plot_h))
        if 0 <= row < plot_h:
            tick_rows[row] = str(label)
    tick_cols: dict[int, str] = {}
    for value, label in zip(xvals, xlabels):
        col = round(x_position(value, xlo, xhi, plot_w))
        if 0 <= col < plot_w:
            tick_cols[col] = str(label)
    pad = " " * margin
    top = "┌" + "─" * plot_w + "┐"
    rows.append([Segment(pad + top, base)])
    lefts = [(tick_rows[row].rjust(margin) + "┤") if row in tick_rows else (pad + "│") for row in range(plot_h)]
    if canvas is not None:
        rows.extend(canvas.rows(base, lefts, "│"))
    else:
        rows.extend([Segment(left + blank + "│", base)] for left in lefts)
    bottom = "".join("┬" if col in tick_cols else "─" for col in range(plot_w))
    rows.append([Segment(pad + "└" + bottom + "┘", base)])
    rows.append([Segment(pad + _x_tick_labels(tick_cols, plot_w), base)])
    if not compact:
        ylabel = str(spec.get("ylabel", ("",))[0])
        xlabel = str(spec.get("xlabel", ("",))[0])
        # x label centred under the plot, moved right (or cut) so that it never covers the y label
        start = max(margin + 1 + (plot_w - len(xlabel)) // 2, len(ylabel) + 2 if ylabel else 0)
        line = (ylabel + " " * width)[:start] + xlabel
        rows.append([Segment((line + " " * width)[:width], base)])
    kept = [line if list(line) == segments and line.cell_length == width else None
            for line, segments in zip(previous, rows[:height])]
    return [line or strip(segments, width, base, measure) for line, segments in zip_longest(kept, rows[:height])] + [
        Strip.blank(width, base) for _ in range(height - len(rows))
    ]


class MemoryChart(KeptLines, Vertical):
    """Chart of memory over time with bands, total line and phase marks (see module doc)."""

    DEFAULT_CSS = """
    MemoryChart { height: 1fr; }
    MemoryChart > #chart-legend {
        height: 1; padding: 0 1; color: $text-muted; text-wrap: nowrap; text-overflow: ellipsis;
    }
    """

    show_bands: reactive[bool] = reactive(True)
    # None: the total is on the scale when it is within chart_samples.TOTAL_SCALE_LIMIT x the data;
    # True / False: always / never (the `t` key flips whichever is shown).
    fit_total: reactive[bool | None] = reactive(None)
    window: reactive[float] = reactive(300.0)

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:  # noqa: A002
        super().__init__(id=id, classes=classes)
        self.title = "memory"
        self.curves: list[CurveSpec] = []
        self.total_bytes: int | None = None
        self.total_label = "GPU total"
        self.bands: list[Band] = []
        self.bands_note: str | None = None
        self.phase_marks: list[PhaseMark] = []
        self.phase_peaks: list[PhasePeak] = []
        self.envelope_runs: list[tuple[Phase, list[tuple[float, float]]]] = []  # as last drawn
        self.total_on_scale = False  # as last drawn
        self.now: float | None = None
        self.message: str | None = None
        self._legend_shown: Text | None = None
        self._drawn_key: tuple | None = None
        self.redraws = 0  # plot rebuilds so far (for tests and benchmarks)
        self._parts: tuple[MemoryPlot, Static] | None = None  # (plot, legend) once composed

    def compose(self) -> ComposeResult:
        # The first frame shows the empty plot: drawn from these, not from no commands (a
        # blank title) and then drawn again on the first resize.
        yield MemoryPlot(id="chart-plot", ops=self._empty_ops())
        yield KeptStatic(id="chart-legend")  # in every frame that draws the plot: kept

    def _empty_ops(self) -> list[tuple[str, tuple, dict]]:
        """The plot commands of a chart without samples: its title (or message) and x range."""
        return [("title", (self.message or f"{self.title}: no samples yet",), {}), ("xlim", (-self.window, 0), {})]

    # ---- inputs -------------------------------------------------------------------------
    def set_title(self, title: str) -> None:
        """Chart title (e.g. "GPU 0: NVML used memory")."""
        self.title = title

    def set_series(self, curves: Sequence[CurveSpec], now: float | None) -> None:
        """The measured curves and the time that counts as 0 on the x axis (epoch seconds)."""
        self.curves = list(curves)
        self.now = now

    def set_total(self, total_bytes: int | None, label: str = "GPU total") -> None:
        """Total memory line in bytes (None hides it)."""
        self.total_bytes = total_bytes
        self.total_label = label

    def set_bands(self, bands: Sequence[Band], note: str | None = None) -> None:
        """Predicted bands: (label, cumulative bytes, theme colour variable), bottom first.

        ``note`` goes on the legend's "predicted" line: what the bands are the estimate of
        (e.g. "llama-3.2-1b (probe, pid 1088)"), or, without bands, why there are none.
        """
        self.bands = [(str(label), int(value), str(var)) for label, value, var in bands]
        self.bands_note = note
        self.replot()

    def set_phase_marks(self, marks: Sequence[PhaseMark]) -> None:
        """Phase marks of the charted process, any order."""
        self.phase_marks = sorted(marks, key=lambda m: m.time)

    def set_phase_peaks(self, peaks: Sequence[PhasePeak]) -> None:
        """Per-phase high-water marks of the charted process (any order); drawn as the
        envelope (see :func:`gpumem_tui.ui.chart_scale.envelope`)."""
        self.phase_peaks = list(peaks)

    def envelope_peak(self) -> int | None:
        """The highest point of the envelope as last drawn (bytes), or None without one."""
        values = [v for _, points in self.envelope_runs for _, v in points]
        return int(max(values)) if values else None

    def set_message(self, message: str | None) -> None:
        """Text shown instead of the plot when there is nothing to chart."""
        self.message = message

    def watch_show_bands(self) -> None:
        self.replot()

    def watch_fit_total(self) -> None:
        self.replot()

    def watch_window(self) -> None:
        self.replot()

    # ---- drawing ------------------------------------------------------------------------
    def _rgb(self, var: str) -> tuple[int, int, int] | str:
        value = self.app.theme_variables.get(var)
        if value is None:
            return "default"
        try:
            return Color.parse(value).rgb
        except ColorParseError:
            return "default"

    def seconds_per_cell(self) -> float:
        """Seconds of history one character column of the plot spans right now."""
        span = self.window
        if self.now is not None and self.curves:
            starts = [c.points[0][0] for c in self.curves if c.points]
            if starts:
                span = min(self.window, max(self.now - min(starts), min(self.window, 30.0)))
        width = max(self.size.width - 10, 10)
        return span / width

    def visible_phase_marks(self) -> list[PhaseMark]:
        if self.now is None:
            return []
        lo = self.now - self.window
        return [m for m in self.phase_marks if lo <= m.time <= self.now]

    def replot(self) -> None:
        """Redraw from the current inputs.

        The plot commands are collected first and compared, at the plot's resolution (braille
        dots), with those last drawn: a rebuild of the whole canvas costs a few ms, so
        a poll that changes nothing visible (a flat curve, the same bands) draws nothing.
        """
        if not self.is_mounted:
            return
        if self._parts is None:  # looked up once: query_one matches a selector over the DOM each time
            try:
                self._parts = (self.query_one(MemoryPlot), self.query_one("#chart-legend", Static))
            except Exception:  # noqa: BLE001 -- not composed yet
                return
        plot, legend = self._parts
        now = self.now
        lo = (now - self.window) if now is not None else 0.0
        curves = [
            CurveSpec(c.label, [p for p in c.points if p[0] >= lo], c.color_var) for c in self.curves
        ]
        curves = [c for c in curves if c.points]
        plot_size = plot.size  # each lookup walks to the screen's compositor map
        width = max(plot_size.width - 10, 10)
        self.envelope_runs = []
        if now is None or not curves:
            ops = self._empty_ops()
            key: tuple = ("empty", tuple(ops), plot_size)
            self._draw(plot, ops, key, plot_size)
            self._set_legend(legend, Text())
            return
        # Drawn by chart_samples, imported with the first samples: the first frame goes without it.
        from gpumem_tui.ui.chart_samples import plot_samples

        ops, legend_text, key = plot_samples(self, plot_size, curves, now, width)
        self._draw(plot, ops, key, plot_size)
        self._set_legend(legend, legend_text)

    def _draw(self, plot: MemoryPlot, ops: list[tuple[str, tuple, dict]], key: tuple, size: Size) -> None:
        """Hand the plot commands to the plot (of ``size``), unless ``key`` equals the last
        one drawn."""
        if key == self._drawn_key:
            return
        self._drawn_key = key
        self.redraws += 1
        plot.draw(ops, size)

    def _set_legend(self, legend: Static, text: Text) -> None:
        # Height set explicitly, so the text can change without a layout pass (a layout
        # costs more than drawing the plot); only a change in line count re-lays out.
        if text == self._legend_shown:
            return
        self._legend_shown = text
        text.no_wrap = True  # one legend row per line, cut with "…" when narrow
        text.overflow = "ellipsis"
        lines = max(text.plain.count("\n") + 1, 1)
        if legend.styles.height is None or legend.styles.height.value != lines:
            legend.styles.height = lines
        legend.update(text, layout=False)

    def on_resize(self) -> None:
        self.replot()
