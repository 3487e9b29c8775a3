"""Loading: YAML files into located data, packs into pipelines, `extends` into merged pipelines.

One pass over libyaml's events (PyYAML's C parser) builds `LMap`/`LList` values
that keep file, line and column, while catching what PyYAML lets through
silently: duplicate keys, YAML 1.1 boolean keys (`on:`), alias bombs and runaway
nesting (checked as the events arrive, so a deep document never reaches a
recursive composer). Problems are collected as diagnostics, never raised one at a time.
"""

from __future__ import annotations

import gc
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from runtime.format.diagnostics import Diagnostic
from runtime.format.files import MAX_FILE_BYTES, read_bounded
from runtime.format.source import LList, LMap, Location, PathT, json_path

MAX_NODES = 200_000  # counts alias expansions, so a "billion laughs" document stops here
MAX_DEPTH = 64
ROOT_ONE = "YAMLpipeline"
ROOT_PACK = "YAMLpipelines"

BOOL_WORDS = {"yes", "no", "on", "off", "y", "n", "true", "false"}
_TAG = "tag:yaml.org,2002:"
_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_resolved: dict[tuple[Any, ...], str] = {}


class _Loader(_Base):  # type: ignore[misc,valid-type]
    """The C parser with tag resolution remembered: it is asked for every scalar.

    A safe loader has no path resolvers, so a tag depends on the kind, the text and
    the implicit flags alone; pipelines repeat the same keys and small values.
    """

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is not yaml.ScalarNode or len(value) > 64:
            return super().resolve(kind, value, implicit)
        key = (value, implicit)
        tag = _resolved.get(key)
        if tag is None:
            if len(_resolved) > 50_000:  # bounded: a hostile file cannot grow it for ever
                _resolved.clear()
            tag = _resolved[key] = super().resolve(kind, value, implicit)
        return tag


_constructor = yaml.constructor.SafeConstructor()


@dataclass(frozen=True)
class BoolKey:
    """A plain key that YAML 1.1 reads as a boolean (restored to its text)."""

    path: PathT
    raw: str
    loc: Location


@dataclass
class YamlFile:
    """A parsed file: its documents (located data) and the problems found."""

    path: str
    documents: list[Any] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    bool_keys: list[BoolKey] = field(default_factory=list)


@dataclass
class PipelineDoc:
    """One pipeline found in a file, before `extends` is applied."""

    file: str
    prefix: PathT  # path of the pipeline inside its file
    data: LMap
    name: str


_gc_lock = threading.Lock()
_gc_holders = 0
_gc_was_enabled = False


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a pipeline is loaded and checked.

    Loading allocates hundreds of thousands of small acyclic objects; each full
    collection walks all of them, which made validation grow with the square of the
    step count (18.6 s for 20,000 steps). Nothing made here forms a cycle, so
    reference counting frees it all. Nested and concurrent holders share one pause;
    the collector is re-enabled (if it was) when the last one leaves.
    """
    global _gc_holders, _gc_was_enabled
    with _gc_lock:
        if _gc_holders == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_holders += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_holders -= 1
            if _gc_holders == 0 and _gc_was_enabled:
                gc.enable()


class _LimitExceeded(Exception):
    def __init__(self, code: str, message: str, mark: Any) -> None:
        super().__init__(message)
        self.code, self.message, self.mark = code, message, mark


def _diag(
    code: str,
    message: str,
    loc: Location,
    path: PathT = (),
    hint: str = "",
    severity: str = "error",
) -> Diagnostic:
    from runtime import codes

    return Diagnostic(
        code,
        severity,
        message,
        loc.file,
        loc.line,
        loc.column,
        json_path(path),
        hint or codes.CODES[code].hint,
        loc.end_line,
        loc.end_column,
    )


_SCALAR = yaml.ScalarEvent
_ALIAS = yaml.AliasEvent
_MAP_START = yaml.MappingStartEvent
_SEQ_START = yaml.SequenceStartEvent
_ENDS = (yaml.MappingEndEvent, yaml.SequenceEndEvent)
_DOC_START = yaml.DocumentStartEvent
_STREAM_END = yaml.StreamEndEvent
_MERGE = _TAG + "merge"
_BOOL = _TAG + "bool"


class _Frame:
    """An open mapping or sequence while its events arrive."""

    __slots__ = ("discard", "key", "key_loc", "key_ok", "merges", "merging", "out", "path", "start")

    def __init__(self, out: Any, start: Any, path: PathT, discard: bool) -> None:
        self.out = out  # LMap or LList (None while discarding)
        self.start = start  # the start event (its mark and anchor)
        self.path = path
        self.discard = discard
        self.key: str | None = None  # a mapping's key waiting for its value
        self.key_loc: Location | None = None
        self.key_ok = True  # False: the key was no scalar; its value is dropped
        self.merging = False  # the value being read belongs to `<<`
        self.merges: list[LMap] = []


class _Builder:
    """Builds located values straight from libyaml's events, in one pass.

    No node tree is composed first: the composer of PyYAML's C loader recurses (so a
    deep document had to be scanned once before composing, or it would crash the
    process) and builds a node per value that is then walked again. Here depth and
    node count are checked as the events arrive. An alias replays the events its
    anchor recorded, so every use is checked (and counted) like the original.
    """

    def __init__(self, yf: YamlFile, loader: Any) -> None:
        self.yf = yf
        self.file = yf.path
        self.loader = loader
        self.visited = 0
        self.anchors: dict[str, list[Any]] = {}
        self.recording: list[tuple[str, list[Any], Any]] = []  # anchors still open
        self.replays: list[Iterator[Any]] = []
        self.marks = (0, 0)  # diagnostics and boolean keys before the current document

    def _event(self) -> Any:
        if not self.replays and not self.recording:
            return self.loader.get_event()  # the common case
        while self.replays:
            event = next(self.replays[-1], None)
            if event is not None:
                return event
            self.replays.pop()
        event = self.loader.get_event()
        for _name, events, _start in self.recording:
            events.append(event)
        return event

    def documents(self) -> Iterator[Any]:
        """Each document's value, in order."""
        while True:
            event = self._event()
            if event is None or isinstance(event, _STREAM_END):
                return
            if isinstance(event, _DOC_START):
                self.anchors.clear()  # anchors do not cross documents
                self.marks = (len(self.yf.diagnostics), len(self.yf.bool_keys))
                yield self._document()

    def _document(self) -> Any:
        stack: list[_Frame] = []
        while True:
            event = self._event()
            cls = event.__class__
            if cls is _ALIAS:
                self._alias(event)
                continue
            starts = cls is _MAP_START or cls is _SEQ_START
            # A replayed alias carries its anchors again: they are defined already.
            if (cls is _SCALAR or starts) and event.anchor is not None and not self.replays:
                self._open_anchor(event)
            frame = stack[-1] if stack else None
            if frame is not None and frame.discard:  # inside a dropped key or value
                if starts:
                    stack.append(_Frame(None, event, frame.path, True))
                elif cls is _SCALAR:
                    self._close_anchor(event)
                else:
                    self._end(stack, event)
                continue
            wants_key = frame is not None and frame.out.__class__ is LMap and frame.key is None
            if wants_key and cls is _SCALAR:
                assert frame is not None
                self._key(frame, event)
                self._close_anchor(event)
                continue
            if wants_key and starts:
                assert frame is not None
                frame.key, frame.key_ok = "", False  # no plain key: reported at its end
                stack.append(_Frame(None, event, frame.path, True))
                continue
            drop = frame is not None and not frame.key_ok  # the value of a dropped key
            if cls is _SCALAR:
                value = None if drop else self._scalar(event)
                self._close_anchor(event)
                if frame is None:
                    return value
                self._place(frame, value, event, event)
                continue
            if starts:
                if not drop:
                    self._count(event)
                    if len(stack) >= MAX_DEPTH:
                        raise _LimitExceeded(
                            "YAML_TOO_DEEP",
                            f"nesting deeper than {MAX_DEPTH} levels",
                            event.start_mark,
                        )
                out = None if drop else (LMap() if cls is _MAP_START else LList())
                stack.append(_Frame(out, event, self._child_path(frame), drop))
                continue
            if isinstance(event, _ENDS):
                done = self._end(stack, event)
                if done is not None:
                    return done
                continue
            raise yaml.composer.ComposerError(
                None, None, f"unexpected {cls.__name__}", event.start_mark
            )

    def _end(self, stack: list[_Frame], event: Any) -> Any:
        """Close the innermost collection; its value when it was the document's root."""
        done = stack.pop()
        self._close_anchor(done.start)
        parent = stack[-1] if stack else None
        loc = self._loc(done.start.start_mark, event.end_mark)
        if done.out is None:  # a dropped key, or the value of one
            if parent is None or parent.discard:
                return None
            if parent.key == "" and not parent.key_ok and parent.key_loc is None:
                parent.key_loc = loc  # the key ended: its value comes next
                self.yf.diagnostics.append(
                    _diag("SCHEMA_TYPE", "mapping keys must be plain strings", loc, parent.path)
                )
                return None
            self._place(parent, None, done.start, event)
            return None
        done.out.loc = loc
        if done.out.__class__ is LMap:
            for merged in done.merges:  # explicit keys win over `<<:` merges
                for key in merged:
                    if key not in done.out:
                        done.out.copy_entry(merged, key)
        if parent is None:
            return done.out
        self._place(parent, done.out, done.start, event)
        return None

    def _discarding(self, stack: list[_Frame]) -> bool:
        return bool(stack) and stack[-1].discard

    def _child_path(self, frame: _Frame | None) -> PathT:
        if frame is None:
            return ()
        if frame.out.__class__ is LList:
            return (*frame.path, len(frame.out))
        if frame.merging or frame.key is None:
            return frame.path
        return (*frame.path, frame.key)

    def _count(self, event: Any) -> None:
        self.visited += 1
        if self.visited > MAX_NODES:
            raise _LimitExceeded(
                "YAML_TOO_LARGE",
                f"more than {MAX_NODES} nodes after alias expansion",
                event.start_mark,
            )

    def _loc(self, start: Any, end: Any, raw: str | None = None) -> Location:
        return Location(
            self.file, start.line + 1, start.column + 1, end.line + 1, end.column + 1, raw
        )

    def _key(self, frame: _Frame, event: Any) -> None:
        if frame.discard:
            frame.key = event.value
            return
        key = event.value
        tag = event.tag
        if (tag is None or tag == "!") and (key == "<<" or key.lower() in BOOL_WORDS):
            # Only `<<` and the YAML 1.1 booleans need their tag: any other key is its text.
            tag = self.loader.resolve(yaml.ScalarNode, key, event.implicit)
        s, e = event.start_mark, event.end_mark
        loc = Location(self.file, s.line + 1, s.column + 1, e.line + 1, e.column + 1)
        if tag == _MERGE:
            frame.merging, frame.key = True, "<<"
            return
        if tag == _BOOL and event.style in (None, "") and key.lower() in BOOL_WORDS:
            self.yf.bool_keys.append(BoolKey((*frame.path, key), key, loc))
        if key in frame.out:
            first = frame.out.key_locs.get(key)
            where = f" (first at line {first.line})" if first else ""
            self.yf.diagnostics.append(
                _diag(
                    "YAML_DUPLICATE_KEY",
                    f"duplicate key {key!r}{where}",
                    loc,
                    (*frame.path, key),
                )
            )
        frame.key, frame.key_loc = key, loc

    def _place(self, frame: _Frame, value: Any, start: Any, end: Any) -> None:
        """Put a finished value into its parent mapping or sequence."""
        if frame.discard or frame.out is None:
            frame.key, frame.key_ok, frame.merging = None, True, False
            return
        raw = start.value if start.__class__ is _SCALAR and start.style in (None, "") else None
        s, e = start.start_mark, end.end_mark
        loc = Location(self.file, s.line + 1, s.column + 1, e.line + 1, e.column + 1, raw)
        if frame.out.__class__ is LList:
            frame.out.push(value, loc)
            return
        if frame.merging:
            frame.merges.extend(
                m for m in (value if isinstance(value, list) else [value]) if isinstance(m, LMap)
            )
        elif frame.key_ok and frame.key is not None:
            frame.out.put(frame.key, value, frame.key_loc, loc)
        frame.key, frame.key_loc, frame.key_ok, frame.merging = None, None, True, False

    def _scalar(self, event: Any) -> Any:
        self._count(event)
        tag = event.tag
        if tag is None or tag == "!":
            tag = self.loader.resolve(yaml.ScalarNode, event.value, event.implicit)
        if tag == _TAG + "str":
            return event.value
        if tag == _TAG + "timestamp" or not tag.startswith(_TAG):
            return event.value  # keep dates and custom tags as their text: pipelines are JSON data
        constructor = _constructor.yaml_constructors.get(tag)
        if constructor is None:
            return event.value
        node = yaml.ScalarNode(tag, event.value, event.start_mark, event.end_mark, event.style)
        return constructor(_constructor, node)

    def _open_anchor(self, event: Any) -> None:
        name = event.anchor
        if name in self.anchors or any(n == name for n, _e, _s in self.recording):
            raise yaml.composer.ComposerError(
                "found duplicate anchor", None, "second occurrence", event.start_mark
            )
        if event.__class__ is _SCALAR:
            self.anchors[name] = [event]
        else:
            self.recording.append((name, [event], event))

    def _close_anchor(self, start: Any) -> None:
        if self.recording and self.recording[-1][2] is start:
            name, events, _start = self.recording.pop()
            self.anchors[name] = events

    def _alias(self, event: Any) -> None:
        name = event.anchor
        if any(n == name for n, _e, _s in self.recording):
            # An alias inside its own anchor nests without end.
            raise _LimitExceeded(
                "YAML_TOO_DEEP", f"nesting deeper than {MAX_DEPTH} levels", event.start_mark
            )
        events = self.anchors.get(name)
        if events is None:
            raise yaml.composer.ComposerError(
                None, None, f"found undefined alias {name!r}", event.start_mark
            )
        self.replays.append(iter(events))  # the anchor's events, read again


def read_yaml(path: str, text: str | None = None) -> YamlFile:
    """Parse a YAML file (all documents) into located values, collecting problems."""
    with gc_paused():
        return _read_yaml(path, text)


def _read_yaml(path: str, text: str | None) -> YamlFile:
    yf = YamlFile(path)
    start = Location(path, 1, 1)
    if text is None:
        raw, problem = read_bounded(path, MAX_FILE_BYTES)
        if problem is not None:
            yf.diagnostics.append(_diag(problem[0], problem[1], start))
            return yf
        assert raw is not None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            yf.diagnostics.append(_diag("FILE_UNREADABLE", f"not UTF-8: {exc.reason}", start))
            return yf
    elif len(text) > MAX_FILE_BYTES or len(text.encode("utf-8")) > MAX_FILE_BYTES:
        yf.diagnostics.append(
            _diag("YAML_TOO_LARGE", f"document exceeds {MAX_FILE_BYTES} bytes", start)
        )
        return yf
    loader = _Loader(text)
    builder = _Builder(yf, loader)
    try:
        try:
            for document in builder.documents():
                yf.documents.append(document)
        except (yaml.YAMLError, _LimitExceeded):
            # A document that does not load has no other findings (as when composing first).
            del yf.diagnostics[builder.marks[0] :], yf.bool_keys[builder.marks[1] :]
            raise
    except _LimitExceeded as exc:
        loc = Location(path, exc.mark.line + 1, exc.mark.column + 1)
        yf.diagnostics.append(_diag(exc.code, exc.message, loc))
        yf.documents.clear()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        loc = Location(path, mark.line + 1, mark.column + 1) if mark else start
        message = " ".join(str(p) for p in (exc.context, exc.problem) if p) or "invalid YAML"
        code = "YAML_SYNTAX"
        if "maximum nesting depth" in str(exc.problem):
            # libyaml >= 0.2.5 stops runaway flow nesting in its scanner, which reads ahead
            # of the events our own depth check sees: the same finding, the same code.
            code, message = "YAML_TOO_DEEP", f"nesting deeper than {MAX_DEPTH} levels"
        yf.diagnostics.append(_diag(code, message, loc))
        yf.documents.clear()
    except yaml.YAMLError as exc:
        yf.diagnostics.append(_diag("YAML_SYNTAX", str(exc).splitlines()[0], start))
        yf.documents.clear()
    finally:
        loader.dispose()
    return yf


def pipelines_in(yf: YamlFile) -> tuple[list[PipelineDoc], list[Diagnostic]]:
    """Find the pipelines of a file: a pipeline, `YAMLpipeline:`, `YAMLpipelines:` or several documents."""
    docs: list[PipelineDoc] = []
    problems: list[Diagnostic] = []
    stem = Path(yf.path).stem
    multi = len(yf.documents) > 1
    if not yf.documents and not any(d.severity == "error" for d in yf.diagnostics):
        # Empty, or comments only: nothing to check is not the same as valid.
        problems.append(
            _diag(
                "YAML_NOT_A_PIPELINE",
                "the file is empty: it holds no YAML document",
                Location(yf.path, 1, 1),
            )
        )
    for d_index, doc in enumerate(yf.documents):
        base: PathT = (d_index,) if multi else ()
        if not isinstance(doc, LMap):
            loc = getattr(doc, "loc", None) or Location(yf.path, 1, 1)
            problems.append(
                _diag("YAML_NOT_A_PIPELINE", "the document is not a mapping", loc, base)
            )
            continue
        if ROOT_PACK in doc:
            pack = doc[ROOT_PACK]
            ppath: PathT = (*base, ROOT_PACK)
            index = _not_a_pack(pack)
            if index is not None:
                # One diagnostic for the file, not one per entry and missing field.
                problems.append(
                    _diag(
                        "YAML_NOT_A_PIPELINE",
                        f"{ROOT_PACK} holds no pipeline: none of its {len(pack)} entries has "
                        f"steps, extends or settings (their fields: {', '.join(index)}); "
                        "this looks like an index of other files, such as the older engine's "
                        "scenario runner list",
                        doc.key_locs.get(ROOT_PACK) or Location(yf.path, 1, 1),
                        ppath,
                        hint="validate the pipeline files it names instead",
                    )
                )
            elif isinstance(pack, LList):
                for i, item in enumerate(pack):
                    _add_doc(
                        docs, problems, yf, (*ppath, i), item, f"{stem}[{i}]", pack.item_locs[i]
                    )
            elif isinstance(pack, LMap):
                for name, item in pack.items():
                    if isinstance(item, LMap) and "name" not in item:
                        item.put("name", name, pack.key_locs.get(name), pack.key_locs.get(name))
                    _add_doc(
                        docs, problems, yf, (*ppath, name), item, name, pack.val_locs.get(name)
                    )
            else:
                problems.append(
                    _diag(
                        "YAML_NOT_A_PIPELINE",
                        f"{ROOT_PACK} must be a list or mapping",
                        doc.val_locs.get(ROOT_PACK) or Location(yf.path, 1, 1),
                        ppath,
                    )
                )
        elif ROOT_ONE in doc:
            _add_doc(
                docs,
                problems,
                yf,
                (*base, ROOT_ONE),
                doc[ROOT_ONE],
                stem,
                doc.val_locs.get(ROOT_ONE),
            )
        else:
            _add_doc(
                docs, problems, yf, base, doc, stem if not multi else f"{stem}[{d_index}]", doc.loc
            )
    seen: dict[str, PipelineDoc] = {}
    for pd in docs:
        if pd.name in seen:
            loc = pd.data.val_locs.get("name") or pd.data.loc or Location(yf.path, 1, 1)
            problems.append(
                _diag(
                    "PACK_DUPLICATE_NAME",
                    f"two pipelines are named {pd.name!r}",
                    loc,
                    (*pd.prefix, "name"),
                )
            )
        seen[pd.name] = pd
    return docs, problems


_PIPELINE_MARKS = ("steps", "extends", "settings")


def _not_a_pack(pack: Any) -> list[str] | None:
    """The entries' field names when no entry of a non-empty pack looks like a pipeline."""
    entries = list(pack.values()) if isinstance(pack, LMap) else pack
    if not isinstance(entries, list) or not entries:
        return None
    if not all(isinstance(e, LMap) for e in entries):
        return None
    if any(mark in e for e in entries for mark in _PIPELINE_MARKS):
        return None
    return sorted({str(k) for e in entries for k in e})


_ROOT_LINE = re.compile(r"^(?:steps|extends|YAMLpipelines?)[ \t]*:", re.MULTILINE)


def _pipeline_root(doc: Any) -> bool:
    if not isinstance(doc, LMap):
        return False
    if ROOT_ONE in doc or ROOT_PACK in doc or isinstance(doc.get("extends"), str):
        return True
    # `steps:` alone is not enough: Azure Pipelines, Drone, Buildkite and Cloud Build
    # files have a top-level `steps` list too; theirs hold no `action`.
    steps = doc.get("steps")
    return isinstance(steps, list) and any(isinstance(s, LMap) and "action" in s for s in steps)


def has_pipeline_root(yf: YamlFile) -> bool:
    """Whether a file is meant as a pipeline (the rule behind `runtime validate --only-pipelines`).

    It is when one of its documents is a mapping with `YAMLpipeline`,
    `YAMLpipelines`, `extends: FILE` or a `steps` list with at least one step naming
    an `action`. A file that did not parse (or was too large to) is judged by its
    text: one of those keys at the start of a line. A file that could not be read
    counts as a pipeline, so that the problem is reported.
    """
    if yf.documents:
        return any(_pipeline_root(doc) for doc in yf.documents)
    if not any(d.severity == "error" for d in yf.diagnostics):
        return False  # empty, or comments only
    if not Path(yf.path).is_file():  # missing, a FIFO or a device: report, never read it
        return True
    try:
        with open(yf.path, "rb") as fh:
            head = fh.read(MAX_FILE_BYTES)
    except OSError:
        return True
    return _ROOT_LINE.search(head.decode("utf-8", errors="replace")) is not None


def _add_doc(
    docs: list[PipelineDoc],
    problems: list[Diagnostic],
    yf: YamlFile,
    prefix: PathT,
    item: Any,
    default_name: str,
    loc: Location | None,
) -> None:
    if not isinstance(item, LMap):
        problems.append(
            _diag(
                "YAML_NOT_A_PIPELINE",
                "a pipeline must be a mapping",
                loc or Location(yf.path, 1, 1),
                prefix,
            )
        )
        return
    name = item.get("name") if isinstance(item.get("name"), str) else default_name
    docs.append(PipelineDoc(yf.path, prefix, item, str(name)))
