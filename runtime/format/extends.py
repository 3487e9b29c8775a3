"""`extends`: merge a pipeline onto its parent, following chains and refusing cycles.

Settings are deep-merged (child scalars win, maps merge, lists are replaced);
steps are merged by `id` (child keys override, new steps append); other
top-level keys: the child's value wins. Merged values keep their origin file,
so diagnostics point into the file a value came from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runtime.format.diagnostics import Diagnostic
from runtime.format.files import shown_path
from runtime.format.loader import PipelineDoc, YamlFile, _diag, pipelines_in, read_yaml
from runtime.format.source import LList, LMap, Location


class _Cycle(Exception):
    def __init__(self, chain: list[tuple[str, str]]) -> None:
        super().__init__("extends cycle")
        self.chain = chain


class FileCache:
    """Parses each file once per validation pass."""

    def __init__(self) -> None:
        self._files: dict[str, tuple[YamlFile, list[PipelineDoc], list[Diagnostic]]] = {}

    def get(self, path: str) -> tuple[YamlFile, list[PipelineDoc], list[Diagnostic]]:
        """The parsed file, its pipelines and the problems found while reading it."""
        key = str(Path(path).resolve())
        if key not in self._files:
            yf = read_yaml(path)
            docs, problems = pipelines_in(yf)
            self._files[key] = (yf, docs, yf.diagnostics + problems)
        return self._files[key]


def _merge_settings(parent: Any, child: Any) -> Any:
    if isinstance(parent, LMap) and isinstance(child, LMap):
        out = LMap(child.loc)
        for key in parent:
            out.copy_entry(parent, key)
        for key in child:
            if key in out:
                merged = _merge_settings(out[key], child[key])
                out.put(key, merged, child.key_locs.get(key), child.val_locs.get(key))
            else:
                out.copy_entry(child, key)
        return out
    return child


def _merge_steps(parent: Any, child: Any) -> Any:
    if not isinstance(parent, LList) or not isinstance(child, LList):
        return child if child is not None else parent
    out = LList(child.loc)
    child_by_id = {
        s.get("id"): (s, child.item_locs[i])
        for i, s in enumerate(child)
        if isinstance(s, LMap) and isinstance(s.get("id"), str)
    }
    used: set[str] = set()
    for i, step in enumerate(parent):
        sid = step.get("id") if isinstance(step, LMap) else None
        if isinstance(sid, str) and sid in child_by_id:
            override, loc = child_by_id[sid]
            merged = LMap(override.loc)
            for key in step:
                merged.copy_entry(step, key)
            for key in override:
                merged.copy_entry(override, key)
            out.push(merged, loc)
            used.add(sid)
        else:
            out.push(step, parent.item_locs[i])
    for i, step in enumerate(child):
        sid = step.get("id") if isinstance(step, LMap) else None
        if not (isinstance(sid, str) and sid in used):
            out.push(step, child.item_locs[i])
    return out


def merge(parent: LMap, child: LMap) -> LMap:
    """The child pipeline merged onto its parent."""
    out = LMap(child.loc)
    for key in parent:
        if key not in ("extends", "abstract"):
            out.copy_entry(parent, key)
    for key in child:
        if key == "extends":
            continue
        if key == "settings" and key in out:
            out.put(
                key,
                _merge_settings(out[key], child[key]),
                child.key_locs.get(key),
                child.val_locs.get(key),
            )
        elif key == "steps" and key in out:
            out.put(
                key,
                _merge_steps(out[key], child[key]),
                child.key_locs.get(key),
                child.val_locs.get(key),
            )
        else:
            out.copy_entry(child, key)
    return out


def resolve(
    doc: PipelineDoc, cache: FileCache, _stack: tuple[tuple[str, str], ...] = ()
) -> tuple[LMap, list[Diagnostic]]:
    """The pipeline with its `extends` chain applied, and the problems found on the way."""
    ref = doc.data.get("extends")
    if ref is None:
        return doc.data, []
    loc = doc.data.val_locs.get("extends") or doc.data.loc or Location(doc.file, 1, 1)
    path = (*doc.prefix, "extends")
    if not isinstance(ref, str) or not ref.strip():
        return doc.data, [
            _diag("SCHEMA_TYPE", "extends must be a file path (optionally #name)", loc, path)
        ]
    file_part, _, name = ref.partition("#")
    # Read from the resolved path, named as the user named this file (relative stays relative).
    target = shown_path(
        (Path(doc.file).parent / file_part).resolve() if file_part else Path(doc.file).resolve(),
        doc.file,
    )
    me = (str(Path(doc.file).resolve()), doc.name)
    stack = (*_stack, me)
    _yf, docs, problems = cache.get(target)
    if any(d.code == "FILE_NOT_FOUND" for d in problems):
        return doc.data, [
            _diag("FILE_NOT_FOUND", f"extends names a missing file: {file_part}", loc, path)
        ]
    unreadable = next((d for d in problems if d.code == "FILE_UNREADABLE"), None)
    if unreadable is not None:  # at the extends line: the named file may not even exist
        return doc.data, [
            _diag("FILE_UNREADABLE", f"extends names {file_part}: {unreadable.message}", loc, path)
        ]
    if name:
        matches = [d for d in docs if d.name == name]
        if not matches:
            names = ", ".join(sorted(d.name for d in docs)) or "none"
            return doc.data, [
                _diag(
                    "EXTENDS_TARGET_UNKNOWN",
                    f"{file_part or 'this file'} has no pipeline named {name!r} (it has: {names})",
                    loc,
                    path,
                )
            ]
        parent_doc = matches[0]
    else:
        if len(docs) != 1:
            return doc.data, [
                *problems,
                _diag(
                    "EXTENDS_TARGET_UNKNOWN",
                    f"{file_part} holds {len(docs)} pipelines; name one with {file_part}#name",
                    loc,
                    path,
                ),
            ]
        parent_doc = docs[0]
    key = (str(Path(parent_doc.file).resolve()), parent_doc.name)
    if key in stack:
        raise _Cycle([*stack, key])
    try:
        parent, parent_problems = resolve(parent_doc, cache, stack)
    except _Cycle as cycle:
        if _stack:
            raise
        # Reported once, at the extends line of the pipeline being validated.
        chain = " -> ".join(f"{Path(f).name}#{n}" for f, n in cycle.chain)
        return doc.data, [_diag("EXTENDS_CYCLE", f"extends cycle: {chain}", loc, path)]
    errors = [p for p in problems + parent_problems if p.severity == "error"]
    parent = _anchored_access(parent, Path(parent_doc.file).parent)
    errors += _access_overrides(parent, doc)
    return merge(parent, doc.data), errors


# Files settings.access names, read relative to the pipeline that names them.
ACCESS_FILES = ("policies", "schema")


def _anchored_access(parent: LMap, folder: Path) -> LMap:
    """The parent with its settings.access files made absolute (from its own folder): a
    pipeline extending it from another folder must not read a policy file of that folder."""
    settings = parent.get("settings")
    if not isinstance(settings, LMap):
        return parent
    access = settings.get("access")
    if not isinstance(access, LMap) or not any(
        isinstance(access.get(k), str) and not Path(access[k]).is_absolute() for k in ACCESS_FILES
    ):
        return parent
    new_access = LMap(access.loc)
    for key in access:
        new_access.copy_entry(access, key)
        value = access[key]
        if key in ACCESS_FILES and isinstance(value, str) and not Path(value).is_absolute():
            new_access.put(
                key,
                str((folder / value).resolve()),
                access.key_locs.get(key),
                access.val_locs.get(key),
            )
    new_settings = LMap(settings.loc)
    for key in settings:
        new_settings.copy_entry(settings, key)
    new_settings.put(
        "access", new_access, settings.key_locs.get("access"), settings.val_locs.get("access")
    )
    out = LMap(parent.loc)
    for key in parent:
        out.copy_entry(parent, key)
    out.put(
        "settings", new_settings, parent.key_locs.get("settings"), parent.val_locs.get("settings")
    )
    return out


def _access_overrides(parent: LMap, doc: PipelineDoc) -> list[Diagnostic]:
    """ACCESS_POLICY_OVERRIDDEN where a child changes a `locked` settings.access it extends."""
    settings = parent.get("settings")
    access = settings.get("access") if isinstance(settings, LMap) else None
    if not isinstance(access, LMap) or access.get("locked") is not True:
        return []
    mine = doc.data.get("settings")
    out = _access_exceptions(settings, mine, doc)
    child = mine.get("access") if isinstance(mine, LMap) else None
    if child is None:
        return out
    if isinstance(child, LMap) and all(
        key in access and _plain(child[key]) == _plain(access[key]) for key in child
    ):
        return out  # repeats what is locked
    loc = (mine.val_locs.get("access") if isinstance(mine, LMap) else None) or doc.data.loc
    out.append(
        _diag(
            "ACCESS_POLICY_OVERRIDDEN",
            "settings.access is locked by the pipeline this one extends; a pipeline "
            "extending it may not change its access policy",
            loc or Location(doc.file, 1, 1),
            (*doc.prefix, "settings", "access"),
        )
    )
    return out


def _access_exceptions(parent: Any, mine: Any, doc: PipelineDoc) -> list[Diagnostic]:
    """ACCESS_POLICY_OVERRIDDEN for each governed exception of an access rule that a child
    of a locked settings.access declares and its parent does not: lifting an access rule
    is changing the access policy (runtime/governance/exceptions.py, LABEL_RULES)."""
    from runtime.governance.exceptions import LABEL_RULES

    items = mine.get("exceptions") if isinstance(mine, LMap) else None
    if not isinstance(items, LList):
        return []
    theirs = parent.get("exceptions") if isinstance(parent, LMap) else None
    kept = [_plain(x) for x in theirs] if isinstance(theirs, list) else []
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, LMap) or item.get("rule") not in LABEL_RULES:
            continue
        if _plain(item) in kept:
            continue  # repeats what the parent declared
        loc = (items.item_locs[i] if i < len(items.item_locs) else None) or item.loc
        out.append(
            _diag(
                "ACCESS_POLICY_OVERRIDDEN",
                f"settings.access is locked by the pipeline this one extends; exception "
                f"{item.get('id')!r} would lift access rule {item.get('rule')!r}, which only "
                "the pipeline that locks the policy may declare",
                loc or doc.data.loc or Location(doc.file, 1, 1),
                (*doc.prefix, "settings", "exceptions", i),
            )
        )
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, LMap):
        return {k: _plain(value[k]) for k in value}
    if isinstance(value, LList):
        return [_plain(v) for v in value]
    return value
