"""The dashboard's footer: Textual's Footer that builds its keys again only when they change.

Textual's Footer (textual/widgets/_footer.py) recomposes -- removes every key widget, builds
and styles new ones -- after each change of the screen's bindings (``Footer.bindings_changed``:
a focus move, ``refresh_bindings``), whether or not the keys it shows changed. A start with
the side pane made 4 recomposes of 10-11 keys, of which 2 changed what is shown (the first
keys, then the first focus's); each key styled 3 times on its mount (issue 23: ~310 of the
~780 stylesheet applies of that start). :class:`SteadyFooter` skips a recompose that would show the same keys,
and gives each new key the footer's ``compact`` before it mounts, as the binding Textual sets
up would a moment later: a key's ``compact`` starts True (``FooterKey.compact``), its watcher
adds the ``-compact`` class on mount (a restyle of the key), then the data binding sets the
footer's False and the watcher removes the class (another restyle). Same keys, same classes,
same screen; two restyles less per key.
"""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult

# FooterKey is not exported by textual.widgets (Textual 8.2); the pin (<9) keeps this path.
from textual.widgets._footer import FooterKey

from gpumem_tui.ui.plain_lines import KeptFooter


class SteadyFooter(KeptFooter):
    """Textual's Footer (with :class:`~gpumem_tui.ui.plain_lines.KeptLines`) that recomposes
    only when the keys it would show differ from those it shows (see the module doc).

    ``recomposes`` counts the recomposes that built the keys again (tests check that a
    start-up builds them no more often than the keys change)."""

    _shown: tuple[Any, ...] | None = None
    recomposes = 0

    def shown_keys(self) -> tuple[Any, ...]:
        """What :meth:`compose` would show now: every input of Textual's ``Footer.compose``
        (each active binding, whether it is enabled, its tooltip and key display; the command
        palette's switches). A Binding is a frozen dataclass: equal bindings show the same."""
        if not self._bindings_ready:
            return ()
        app = self.app
        return (
            self.show_command_palette, app.ENABLE_COMMAND_PALETTE, app.COMMAND_PALETTE_BINDING,
            tuple((key, binding, enabled, tooltip, app.get_key_display(binding))
                  for key, (_, binding, enabled, tooltip) in self.screen.active_bindings.items()),
        )

    async def recompose(self) -> None:
        """Textual's recompose, skipped while the keys shown would be the same."""
        if self.is_attached and self._shown is not None and self.shown_keys() == self._shown:
            return
        self.recomposes += 1
        await super().recompose()

    def compose(self) -> ComposeResult:
        self._shown = self.shown_keys()
        compact = self.compact
        for widget in super().compose():
            # The keys Textual binds to the footer's compact (all but the command palette's,
            # which keeps FooterKey's default) get it now rather than on mount.
            if isinstance(widget, FooterKey) and not widget.has_class("-command-palette"):
                widget.set_reactive(FooterKey.compact, compact)
                widget.set_class(compact, "-compact", update=False)
            yield widget
