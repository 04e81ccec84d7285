"""gpumem_tui.ui.plain_lines: the short way through Textual's line styling draws the strips
Textual's own StylesCache draws, for every mix of box styles (the short way for plain widgets,
Textual's for the rest), and KeptLines hands back kept lines only while nothing changed."""

from __future__ import annotations

import pytest
from rich.text import Text
from textual._styles_cache import StylesCache
from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Static

from gpumem_tui.ui.plain_lines import KeptLines, PlainStylesCache

STYLES = [
    "",
    "border-bottom: solid red;",
    "border-top: tall blue; border-bottom: solid red;",
    "border: round green;",
    "border-left: solid red;",
    "padding: 1 2;",
    "padding: 0 1;",
    "tint: red 30%;",
    "text-opacity: 0.5;",
    "outline: solid yellow;",
    "hatch: cross red;",
    "background: #202040; color: #ff8800;",
    "background-tint: white 5%;",
]


class Lines(Widget):
    """A line-API widget: line y shows "row y" in a colour of its own."""

    def render_line(self, y: int) -> Strip:
        return Strip(Text(f"row {y} " * 4, style="bold magenta" if y % 2 else "green").render(self.app.console))


class Plain(App[None]):
    def compose(self) -> ComposeResult:
        for index, css in enumerate(STYLES):
            widget = Lines(id=f"w{index}")
            widget.styles.height = 5
            widget.styles.width = 30
            widget.set_styles(css)
            yield widget


@pytest.mark.parametrize("theme", ["textual-dark", "textual-light", "nord"])
async def test_plain_styles_cache_draws_textuals_strips(theme: str) -> None:
    app = Plain()
    async with app.run_test(size=(40, 80)) as pilot:
        app.theme = theme
        await pilot.pause()
        for index in range(len(STYLES)):
            widget = app.query_one(f"#w{index}", Lines)
            region = widget.region.size.region
            for crop in (region, Region(0, 1, region.width, 2), Region(2, 0, 5, region.height)):
                drawn = PlainStylesCache().render_widget(widget, crop)
                textuals = StylesCache().render_widget(widget, crop)
                assert drawn == textuals, STYLES[index]
                assert [s.cell_length for s in drawn] == [s.cell_length for s in textuals]


async def test_the_short_way_is_taken_for_plain_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    textual_lines: list[int] = []
    original = StylesCache.render_line

    def counted(self: StylesCache, styles: object, y: int, *rest: object) -> Strip:
        textual_lines.append(y)
        return original(self, styles, y, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(StylesCache, "render_line", counted)
    app = Plain()
    async with app.run_test(size=(40, 80)):
        for index, textuals in ((0, []), (1, [4]), (2, [0, 4]), (3, [0, 1, 2, 3, 4]), (5, [0, 1, 2, 3, 4])):
            widget = app.query_one(f"#w{index}", Lines)
            textual_lines.clear()
            PlainStylesCache().render_widget(widget, widget.region.size.region)
            # no box style, or only a top / bottom border: Textual draws only the border lines
            assert textual_lines == textuals, STYLES[index]


class SameLines(Lines):
    """Lines that hand back the same strip for a line drawn again (as LineTable's cache)."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._styles_cache = PlainStylesCache()
        self.kept: dict[int, Strip] = {}

    def render_line(self, y: int) -> Strip:
        if y not in self.kept:
            self.kept[y] = super().render_line(y).adjust_cell_length(self.size.width)
        return self.kept[y]


class Same(App[None]):
    def compose(self) -> ComposeResult:
        yield SameLines(id="same")


async def test_a_line_drawn_again_the_same_gives_the_same_strips() -> None:
    """A plain widget's line as wide as the widget is handed on as it is (not copied): a line
    drawn again, unchanged, comes out as the same strip, and so does its filtered strip (the
    compositor's divide cache then holds too); the strips equal Textual's own."""
    app = Same()
    async with app.run_test(size=(30, 6)) as pilot:
        await pilot.pause()
        widget = app.query_one(SameLines)
        cache = widget._styles_cache
        assert isinstance(cache, PlainStylesCache)
        region = widget.region.size.region
        first = cache.render_widget(widget, region)
        cache.set_dirty(region)  # every line drawn again
        again = cache.render_widget(widget, region)
        assert all(a is b for a, b in zip(first, again)) and len(first) == region.height
        assert again == StylesCache().render_widget(widget, region)


class KeptStatic(KeptLines, Static):
    """A Static that hands back its lines while they are unchanged (the mixin under test)."""


class Kept(App[None]):
    def compose(self) -> ComposeResult:
        yield KeptStatic("first", id="kept")


async def test_kept_lines_are_handed_back_only_while_unchanged() -> None:
    app = Kept()
    async with app.run_test(size=(30, 5)) as pilot:
        widget = app.query_one("#kept", KeptStatic)
        region = widget.region.size.region
        first = widget.render_lines(region)
        assert widget.render_lines(region) is first  # nothing changed: the same list
        assert widget.render_lines(Region(0, 0, 3, 1)) is not first  # another crop is drawn
        widget.update("second")
        await pilot.pause()
        region = widget.region.size.region
        second = widget.render_lines(region)
        assert "second" in second[0].text and second is not first
        app.theme = "textual-light" if app.theme != "textual-light" else "textual-dark"
        await pilot.pause()
        third = widget.render_lines(widget.region.size.region)
        assert third is not second and third == Widget.render_lines(widget, widget.region.size.region)
