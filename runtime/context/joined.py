"""A message text kept as its parts until it is needed whole (issue 25 item 9).

call_model's user message is its parts joined; one part may be a large state value that
the context policy is about to put behind a pointer. Joining first held the value twice
(the variable and the message). A `JoinedText` compares against the policy's pieces part
by part, so the whole text is built only where it is sent as it is.
"""

from __future__ import annotations

from bisect import bisect_right


class JoinedText:
    """parts joined by sep, without the joined copy; `str()` builds it."""

    __slots__ = ("_ends", "_pieces")

    def __init__(self, parts: list[str], sep: str) -> None:
        pieces: list[str] = []
        for i, part in enumerate(parts):
            if i and sep:
                pieces.append(sep)
            pieces.append(part)
        self._pieces = pieces
        ends, total = [], 0
        for piece in pieces:
            total += len(piece)
            ends.append(total)
        self._ends = ends

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    def __str__(self) -> str:
        return "".join(self._pieces)

    def __repr__(self) -> str:
        return f"JoinedText({len(self)} characters in {len(self._pieces)} pieces)"

    def startswith(self, prefix: str, start: int = 0) -> bool:
        """Whether the joined text has prefix at start (as `str.startswith(prefix, start)`)."""
        if start < 0 or start + len(prefix) > len(self):
            return False
        while prefix:
            i = bisect_right(self._ends, start)  # the piece holding character `start`
            piece = self._pieces[i]
            offset = start - (self._ends[i] - len(piece))
            room = len(piece) - offset
            if len(prefix) <= room:
                return piece.startswith(prefix, offset)
            if not piece.startswith(prefix[:room], offset):
                return False
            prefix, start = prefix[room:], start + room
        return True


def whole(text: str | JoinedText) -> str:
    """text as one string."""
    return text if isinstance(text, str) else str(text)
