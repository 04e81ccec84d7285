"""Modal screens: key help, process detail, and the signal confirmation dialog."""

from __future__ import annotations

import signal as _signal
from collections.abc import Callable, Collection, Iterable, Mapping

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from gpumem_tui.telemetry.model import NAMESPACE_NOTE, ProbeInfo, ProcessSample, ProcessStatus
from gpumem_tui.support.text import printable
from gpumem_tui.ui import cells


def help_rows(bindings: Iterable[Binding], skip_actions: Collection[str], keymap: Mapping[str, str],
              key_display: Callable[[Binding], str]) -> list[tuple[str, str, str]]:
    """(keys, description, id) for each of ``bindings`` (the first of each id; system ones and
    those whose action is in ``skip_actions`` left out), its keys as ``keymap`` (binding id ->
    keys) set them and ``key_display`` (the app's) shows them. The form field's key for the
    job's estimate shares the table key's row."""
    rows: list[tuple[str, str, str]] = []
    seen: set[object] = set()
    for binding in bindings:
        ident = binding.id or (binding.key, binding.action)
        if not isinstance(binding, Binding) or ident in seen or binding.system:
            continue
        if binding.action.split("(")[0] in skip_actions:
            continue
        seen.add(ident)
        keys = keymap.get(binding.id, binding.key) if binding.id else binding.key
        shown = ", ".join(key_display(Binding(k.strip(), "")) for k in keys.split(","))
        rows.append((shown, binding.tooltip or binding.description, binding.id or ""))
    merged = {row[2]: row for row in rows}
    if "job_estimate" in merged and "job_estimate_in_field" in merged:
        field_keys = merged["job_estimate_in_field"][0]
        rows = [(f"{keys}, {field_keys} (in a field)", description, ident) if ident == "job_estimate" else
                (keys, description, ident) for keys, description, ident in rows if ident != "job_estimate_in_field"]
    return rows


class HelpScreen(ModalScreen[None]):
    """Lists every key binding with what it does, in words (``rows``: (keys, description,
    binding id); the id, which names the binding in the config file's ``[keys]`` table, is
    kept in ``rows`` for that but not shown)."""

    BINDINGS = [
        Binding("escape,q,question_mark", "dismiss", "Close", id="help_close", tooltip="Close the help"),
    ]

    def __init__(self, rows: Iterable[tuple[str, str, str]]) -> None:
        super().__init__()
        self.rows = list(rows)

    def compose(self) -> ComposeResult:
        table = Table(box=None, show_header=True, header_style="bold", expand=False)
        table.add_column("key")
        table.add_column("what it does")
        for key, description, _binding_id in self.rows:
            table.add_row(Text(key), Text(description))
        with Vertical(id="help-box", classes="dialog"):
            yield Static(Text("Keys", style="bold"), classes="dialog-title")
            with VerticalScroll():
                yield Static(table, id="help-table")
            yield Static(
                Text("Filter syntax: user:NAME gpu:N word ...  (Esc clears).  The config file's [keys] "
                     "table changes keys.  Esc / ? closes."),
                classes="dialog-hint",
            )

    def action_dismiss(self) -> None:  # type: ignore[override]
        self.dismiss(None)


def detail_rows(proc: ProcessSample, now: float, probe: ProbeInfo | None) -> list[tuple[str, Text]]:
    """(label, literal Text) rows describing one process; untrusted text via printable()."""
    running = None if proc.start_time is None else now - proc.start_time
    rows: list[tuple[str, Text]] = [  # every value literal: Text, never markup
        ("PID", Text(str(proc.pid))),
        ("GPU", Text("-" if proc.device_index is None else str(proc.device_index))),
        ("type", Text(proc.type.value)),
        ("state", Text(NAMESPACE_NOTE if proc.status is ProcessStatus.NOT_IN_NAMESPACE
                       else cells.status_text(proc) or "running")),
        ("user", cells.user(proc)),
        ("GPU memory (NVML used)", cells.mib(proc.used_memory_bytes, proc.reason("used_memory_bytes"))),
        ("SM %", cells.percent(proc.sm_percent, proc.reason("sm_percent"))),
        ("host CPU %", cells.percent(proc.cpu_percent, proc.reason("cpu_percent"))),
        ("host RSS", cells.mib(proc.rss_bytes, proc.reason("rss_bytes"))),
        ("running time", Text(cells.duration(running))),
        ("container / pod", cells.container(proc)),
        ("command", cells.safe(proc.command, limit=8192) if proc.command else cells.missing(proc.reason("command"))),
    ]
    if probe is not None:
        setup = ", ".join(f"{printable(str(k), 64)}={printable(str(v), 128)}" for k, v in probe.setup)
        rows.append(("probe", Text(("ended; " if probe.ended else "") + (setup or "attached"))))
    shown = {"used_memory_bytes", "sm_percent", "cpu_percent", "rss_bytes", "user", "command"}
    for name, reason in proc.field_errors:
        if name not in shown:  # those rows already say why they are missing
            rows.append((printable(name, 64), Text(printable(reason, 256), style="dim")))
    return rows


class ProcessDetailScreen(ModalScreen[None]):
    """Everything known about one process, command in full (literal)."""

    BINDINGS = [Binding("escape,q,enter", "dismiss", "Close", id="detail_close", tooltip="Close the detail")]

    def __init__(self, proc: ProcessSample, now: float, probe: ProbeInfo | None = None) -> None:
        super().__init__()
        self.proc = proc
        self.now = now
        self.probe = probe

    def compose(self) -> ComposeResult:
        table = Table(box=None, show_header=False, expand=True)
        table.add_column(style="bold", no_wrap=True)
        table.add_column(overflow="fold")
        for label, value in detail_rows(self.proc, self.now, self.probe):
            table.add_row(Text(label), value)
        with Vertical(id="detail-box", classes="dialog"):
            yield Static(Text(f"Process {self.proc.pid}", style="bold"), classes="dialog-title")
            with VerticalScroll():
                yield Static(table, id="detail-table")
            yield Static(Text("Esc closes"), classes="dialog-hint")

    def action_dismiss(self) -> None:  # type: ignore[override]
        self.dismiss(None)


def signal_name(sig: int) -> str:
    try:
        return _signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


class ConfirmSignalScreen(ModalScreen[bool]):
    """Asks before sending ``sig`` to ``proc``; names pid, user and command. Result: True = send."""

    BINDINGS = [
        Binding("escape,n", "cancel", "Cancel", id="signal_cancel", tooltip="Do not send"),
        Binding("y", "confirm", "Send", id="signal_confirm", tooltip="Send the signal"),
    ]

    def __init__(self, proc: ProcessSample, sig: int) -> None:
        super().__init__()
        self.proc = proc
        self.sig = sig

    def question(self) -> Text:
        user = printable(self.proc.user, 64) if self.proc.user else "unknown user"
        text = Text(f"Send {signal_name(self.sig)} to PID {self.proc.pid} (user {user})?\n\n")
        text.append("command: ", style="bold")
        text.append_text(cells.safe(self.proc.command or "unknown", limit=1024))
        return text

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box", classes="dialog"):
            yield Static(Text(f"Send {signal_name(self.sig)}", style="bold"), classes="dialog-title")
            yield Static(self.question(), id="confirm-question")
            with Horizontal(id="confirm-buttons"):
                yield Button(f"Send {signal_name(self.sig)} (y)", id="confirm-yes", variant="error")
                yield Button("Cancel (n)", id="confirm-no", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#confirm-no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "confirm-yes")

    def action_confirm(self) -> None:
        self.dismiss(True)

    def action_cancel(self) -> None:
        self.dismiss(False)
