"""Loading: YAML files into located data, packs into pipelines, `extends` into merged pipelines.

PyYAML's C composer builds the node tree; one walk turns it into `LMap`/`LList`
values that keep file, line and column, while catching what PyYAML lets through
silently: duplicate keys, YAML 1.1 boolean keys (`on:`), alias bombs and runaway
nesting. Problems are collected as diagnostics, never raised one at a time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from runtime.format.diagnostics import Diagnostic
from runtime.format.source import LList, LMap, Location, PathT, json_path

MAX_FILE_BYTES = 2 * 1024 * 1024
MAX_NODES = 200_000  # counts alias expansions, so a "billion laughs" document stops here
MAX_DEPTH = 64
ROOT_ONE = "YAMLpipeline"
ROOT_PACK = "YAMLpipelines"

BOOL_WORDS = {"yes", "no", "on", "off", "y", "n", "true", "false"}
_TAG = "tag:yaml.org,2002:"
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
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


def _loc(file: str, node: yaml.Node, raw: str | None = None) -> Location:
    s, e = node.start_mark, node.end_mark
    return Location(file, s.line + 1, s.column + 1, e.line + 1, e.column + 1, raw)


def _max_possible_depth(text: str) -> int:
    """A cheap upper bound on nesting depth, so the exact scan runs only when needed."""
    brackets = text.count("[") + text.count("{")
    indent = max((len(m.group(0)) for m in re.finditer(r"(?m)^[ -]+", text)), default=0)
    return brackets + 2 * (indent + 1)


def _check_depth(text: str, file: str) -> None:
    """Refuse deep nesting before composing (libyaml's composer recurses and can crash)."""
    if _max_possible_depth(text) <= MAX_DEPTH:
        return
    depth = 0
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise _LimitExceeded(
                    "YAML_TOO_DEEP", f"nesting deeper than {MAX_DEPTH} levels", event.start_mark
                )
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


class _Walker:
    """Turns one composed document into located values."""

    def __init__(self, yf: YamlFile) -> None:
        self.yf = yf
        self.file = yf.path
        self.visited = 0

    def value(self, node: yaml.Node, path: PathT, depth: int) -> Any:
        self.visited += 1
        if self.visited > MAX_NODES:
            raise _LimitExceeded(
                "YAML_TOO_LARGE",
                f"more than {MAX_NODES} nodes after alias expansion",
                node.start_mark,
            )
        if depth > MAX_DEPTH:
            raise _LimitExceeded(
                "YAML_TOO_DEEP", f"nesting deeper than {MAX_DEPTH} levels", node.start_mark
            )
        if isinstance(node, yaml.MappingNode):
            return self.mapping(node, path, depth)
        if isinstance(node, yaml.SequenceNode):
            seq = LList(_loc(self.file, node))
            for i, item in enumerate(node.value):
                seq.push(self.value(item, (*path, i), depth + 1), self.scalar_loc(item))
            return seq
        assert isinstance(node, yaml.ScalarNode)
        return self.scalar(node)

    def scalar_loc(self, node: yaml.Node) -> Location:
        raw = node.value if isinstance(node, yaml.ScalarNode) and node.style in (None, "") else None
        return _loc(self.file, node, raw)

    def scalar(self, node: yaml.ScalarNode) -> Any:
        tag = node.tag
        if tag == _TAG + "str":
            return node.value
        if tag == _TAG + "timestamp" or not tag.startswith(_TAG):
            return node.value  # keep dates and custom tags as their text: pipelines are JSON data
        constructor = _constructor.yaml_constructors.get(tag)
        if constructor is None:
            return node.value
        return constructor(_constructor, node)

    def mapping(self, node: yaml.MappingNode, path: PathT, depth: int) -> LMap:
        out = LMap(_loc(self.file, node))
        merges: list[LMap] = []
        for key_node, val_node in node.value:
            if key_node.tag == _TAG + "merge":
                merged = self.value(val_node, path, depth + 1)
                merges.extend(
                    m
                    for m in (merged if isinstance(merged, list) else [merged])
                    if isinstance(m, LMap)
                )
                continue
            key_loc = _loc(self.file, key_node)
            if isinstance(key_node, yaml.ScalarNode):
                key = key_node.value
                if (
                    key_node.tag == _TAG + "bool"
                    and key_node.style in (None, "")
                    and key.lower() in BOOL_WORDS
                ):
                    self.yf.bool_keys.append(BoolKey((*path, key), key, key_loc))
            else:
                self.yf.diagnostics.append(
                    _diag("SCHEMA_TYPE", "mapping keys must be plain strings", key_loc, path)
                )
                continue
            if key in out:
                first = out.key_locs.get(key)
                where = f" (first at line {first.line})" if first else ""
                self.yf.diagnostics.append(
                    _diag(
                        "YAML_DUPLICATE_KEY", f"duplicate key {key!r}{where}", key_loc, (*path, key)
                    )
                )
            out.put(
                key,
                self.value(val_node, (*path, key), depth + 1),
                key_loc,
                self.scalar_loc(val_node),
            )
        for merged in merges:  # explicit keys win over `<<:` merges
            for key in merged:
                if key not in out:
                    out.copy_entry(merged, key)
        return out


def read_yaml(path: str, text: str | None = None) -> YamlFile:
    """Parse a YAML file (all documents) into located values, collecting problems."""
    yf = YamlFile(path)
    start = Location(path, 1, 1)
    if text is None:
        try:
            raw = Path(path).read_bytes()
        except FileNotFoundError:
            yf.diagnostics.append(_diag("FILE_NOT_FOUND", f"no such file: {path}", start))
            return yf
        except OSError as exc:
            yf.diagnostics.append(
                _diag("FILE_UNREADABLE", f"cannot read {path}: {exc.strerror}", start)
            )
            return yf
        if len(raw) > MAX_FILE_BYTES:
            yf.diagnostics.append(
                _diag(
                    "YAML_TOO_LARGE",
                    f"file is {len(raw)} bytes; the limit is {MAX_FILE_BYTES}",
                    start,
                )
            )
            return yf
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            yf.diagnostics.append(_diag("FILE_UNREADABLE", f"not UTF-8: {exc.reason}", start))
            return yf
    elif len(text.encode("utf-8")) > MAX_FILE_BYTES:
        yf.diagnostics.append(
            _diag("YAML_TOO_LARGE", f"document exceeds {MAX_FILE_BYTES} bytes", start)
        )
        return yf
    try:
        _check_depth(text, path)
        walker = _Walker(yf)
        for node in yaml.compose_all(text, Loader=_Loader):
            if node is not None:
                yf.documents.append(walker.value(node, (), 0))
    except _LimitExceeded as exc:
        loc = Location(path, exc.mark.line + 1, exc.mark.column + 1)
        yf.diagnostics.append(_diag(exc.code, exc.message, loc))
        yf.documents.clear()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        loc = Location(path, mark.line + 1, mark.column + 1) if mark else start
        message = " ".join(str(p) for p in (exc.context, exc.problem) if p) or "invalid YAML"
        yf.diagnostics.append(_diag("YAML_SYNTAX", message, loc))
        yf.documents.clear()
    except yaml.YAMLError as exc:
        yf.diagnostics.append(_diag("YAML_SYNTAX", str(exc).splitlines()[0], start))
        yf.documents.clear()
    return yf


def pipelines_in(yf: YamlFile) -> tuple[list[PipelineDoc], list[Diagnostic]]:
    """Find the pipelines of a file: a pipeline, `YAMLpipeline:`, `YAMLpipelines:` or several documents."""
    docs: list[PipelineDoc] = []
    problems: list[Diagnostic] = []
    stem = Path(yf.path).stem
    multi = len(yf.documents) > 1
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
            if isinstance(pack, LList):
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
