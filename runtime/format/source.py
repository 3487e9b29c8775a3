"""Source positions: located containers built by the loader and the map from JSON paths to them.

The loader turns YAML nodes into `LMap` / `LList`, plain dict and list subclasses
that also remember where the container, each key and each value came from (file,
line, column). Merging (`extends`) moves these objects around, so a value keeps
its origin file. `SourceMap` answers "where is `$.steps[3].top_k`?".
"""

from __future__ import annotations

from typing import Any, NamedTuple

PathT = tuple[str | int, ...]


class Location(NamedTuple):
    """A 1-based position in a file; `raw` is a plain scalar's source text.

    A named tuple, not a frozen dataclass: the loader makes two per YAML node, and a
    tuple is made three times faster (a 20,000-step pipeline has ~300,000 of them).
    """

    file: str
    line: int
    column: int
    end_line: int = 0
    end_column: int = 0
    raw: str | None = None


class LMap(dict[str, Any]):
    """A dict that remembers where it, its keys and its values are in the source."""

    __slots__ = ("key_locs", "loc", "val_locs")

    def __init__(self, loc: Location | None = None) -> None:
        super().__init__()
        self.loc = loc
        self.key_locs: dict[str, Location] = {}
        self.val_locs: dict[str, Location] = {}

    def put(self, key: str, value: Any, key_loc: Location | None, val_loc: Location | None) -> None:
        """Set a key with its positions."""
        self[key] = value
        if key_loc is not None:
            self.key_locs[key] = key_loc
        if val_loc is not None:
            self.val_locs[key] = val_loc

    def copy_entry(self, other: LMap, key: str) -> None:
        """Copy one entry from another LMap, keeping its positions."""
        self.put(key, other[key], other.key_locs.get(key), other.val_locs.get(key))


class LList(list[Any]):
    """A list that remembers where it and each item are in the source."""

    __slots__ = ("item_locs", "loc")

    def __init__(self, loc: Location | None = None) -> None:
        super().__init__()
        self.loc = loc
        self.item_locs: list[Location | None] = []

    def push(self, value: Any, loc: Location | None) -> None:
        """Append an item with its position."""
        self.append(value)
        self.item_locs.append(loc)


def json_path(path: PathT) -> str:
    """Render a path as `$.steps[2].top_k`."""
    out = "$"
    for seg in path:
        if isinstance(seg, int):
            out += f"[{seg}]"
        elif seg.isidentifier():
            out += f".{seg}"
        else:
            out += f"[{seg!r}]"
    return out


class SourceMap:
    """Finds the source location of any path inside a located document."""

    def __init__(self, root: Any, file: str, prefix: PathT = ()) -> None:
        self.root = root
        self.file = file
        self.prefix = prefix  # where this pipeline sits inside its file (packs)

    def locate(self, path: PathT, *, key: bool = False) -> Location:
        """The location of the value at `path` (or of its key), else the nearest ancestor's."""
        node: Any = self.root
        best = getattr(node, "loc", None) or Location(self.file, 1, 1)
        for i, seg in enumerate(path):
            last = i == len(path) - 1
            if isinstance(node, LMap) and isinstance(seg, str) and seg in node:
                loc = node.key_locs.get(seg) if key and last else node.val_locs.get(seg)
                if loc is None:
                    loc = node.key_locs.get(seg)
                if loc is not None:
                    best = loc
                node = node[seg]
            elif isinstance(node, LList) and isinstance(seg, int) and 0 <= seg < len(node):
                loc = node.item_locs[seg] if seg < len(node.item_locs) else None
                if loc is not None:
                    best = loc
                node = node[seg]
            else:
                break
        return best

    def raw(self, path: PathT) -> str | None:
        """The plain source text of a scalar, when it was a plain scalar."""
        loc = self.locate(path)
        return loc.raw

    def full_path(self, path: PathT) -> PathT:
        """The path from the file's root (adds the pack prefix)."""
        return self.prefix + path
