"""What `runtime exec` and `runtime resume` draw on a terminal while a run goes on.

Two streams share one screen: a spinner on stderr naming the step that is running
now, and model text streamed to stdout as it arrives. They never share a line: the
spinner is cleared before the first piece of a reply is written and drawn again,
on a fresh line, once the reply has ended (the next trace event says so).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from runtime.cli._common import color_enabled, shown


class Progress:
    """A run's terminal view: the current step on a spinner, streamed replies as they come."""

    def __init__(
        self,
        actions: Mapping[str, str],
        *,
        first_step: str | None,
        spinner: bool,
        stream: bool,
        out: TextIO | None = None,
    ) -> None:
        self.actions = dict(actions)  # step id -> action name, for the spinner's label
        self.step_id = first_step
        self.count = 0  # steps finished in this process
        self.streamed: list[str] = []  # the text of each streamed reply, in order
        self._spinner = spinner
        self._stream = stream
        self._out = out or sys.stdout
        self._live: Any = None
        self._spin: Any = None
        self._piece: list[str] | None = None  # the reply being streamed, while it is
        # "STEP: message" of each trace event that carries a `warning` (printed at the end).
        self.warnings: list[str] = []

    # --- what the engine calls -------------------------------------------------------
    def on_event(self, event: dict[str, Any]) -> None:
        """A trace event: any event ends a streamed reply; STEP, CATCH and RUN_RESUMED move on."""
        if isinstance(event.get("warning"), str):
            self.warnings.append(f"{event.get('step_id') or 'run'}: {event['warning']}")
        if not (self._spinner or self._stream):
            return
        self._end_reply()
        kind = event.get("type")
        if kind in ("STEP", "CATCH"):
            self.count += 1
            self.step_id = event.get("next")
        elif kind == "RUN_RESUMED":
            self.step_id = event.get("position")
        elif kind in ("RUN_COMPLETED", "RUN_FAILED"):
            self.step_id = None
        self._draw()

    def on_chunk(self, text: str) -> None:
        """A piece of a streamed reply: clear the spinner (once), then write it."""
        if not text:
            return
        if self._piece is None:
            self._stop_spinner()
            self._piece = []
        self._piece.append(text)
        self._out.write(shown(text))  # a reply's escape sequences are shown, not obeyed
        self._out.flush()

    # --- lifetime -------------------------------------------------------------------------
    def __enter__(self) -> Progress:
        self._draw()
        return self

    def __exit__(self, *exc: object) -> None:
        self._end_reply()
        self._stop_spinner()

    @property
    def chunk_listener(self) -> Callable[[str], None] | None:
        """on_chunk when replies are streamed, else None (the provider then need not stream)."""
        return self.on_chunk if self._stream else None

    @property
    def event_listener(self) -> Callable[[dict[str, Any]], None]:
        """on_event: draws when anything is drawn, and collects the run's warnings."""
        return self.on_event

    # --- drawing --------------------------------------------------------------------------
    def label(self) -> str:
        """`step N: ID (ACTION)` for the step running now."""
        sid = self.step_id or ""
        action = self.actions.get(sid)
        return f"step {self.count + 1}: {sid}" + (f" ({action})" if action else "")

    def _end_reply(self) -> None:
        if self._piece is None:
            return
        text = "".join(self._piece)
        self.streamed.append(text)
        self._piece = None
        if not text.endswith("\n"):
            self._out.write("\n")  # the spinner comes back on a line of its own
            self._out.flush()

    def _draw(self) -> None:
        if not self._spinner or self._piece is not None:
            return
        if self.step_id is None:
            self._stop_spinner()
            return
        from rich.text import Text  # rich is imported only when something is drawn

        if self._live is None:
            from rich.console import Console
            from rich.live import Live
            from rich.spinner import Spinner

            console = Console(stderr=True, no_color=not color_enabled(sys.stderr))
            # Text, not a str: rich would read `[...]` in a label as markup.
            self._spin = Spinner("dots", Text(self.label()), style="status.spinner")
            # No redirection: stdout carries the answer and must reach the terminal as written.
            self._live = Live(
                self._spin,
                console=console,
                transient=True,
                refresh_per_second=12.5,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start(refresh=True)
        elif self._spin.text.plain != self.label():  # most events leave the label as it is
            self._spin.update(text=Text(self.label()))
            self._live.refresh()

    def _stop_spinner(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def already_shown(self, text: str) -> bool:
        """Whether this text reached the terminal as a streamed reply."""
        return bool(text.strip()) and text.strip() in (s.strip() for s in self.streamed)
