"""C#: symbols (namespaces, types, members) and references from tree-sitter, plus embedded SQL.

References are names as written (`IOrderRepository`, `SaveAsync`); `classifiers.resolve`
matches them to symbols across the codebase. SQL in string literals passed to
ADO.NET, Dapper, EF Core or migrations is scanned for the objects it touches.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from classifiers import tsql
from classifiers.model import Dependency, Symbol

_TYPES = {
    "class_declaration": "class",
    "record_declaration": "record",
    "struct_declaration": "struct",
    "interface_declaration": "interface",
    "enum_declaration": "enum",
    "record_struct_declaration": "struct",
}
_MEMBERS = {
    "method_declaration": "method",
    "constructor_declaration": "constructor",
    "property_declaration": "property",
}
# Members with no `name` field, or other kinds of public surface.
_OTHER_MEMBERS = {
    "event_declaration": "event",
    "indexer_declaration": "indexer",
    "operator_declaration": "operator",
    "conversion_operator_declaration": "operator",
    "destructor_declaration": "destructor",
    "delegate_declaration": "delegate",
}
_NAMESPACES = ("namespace_declaration", "file_scoped_namespace_declaration")
# Minimal-API endpoint maps (ASP.NET Core): each call is an endpoint node.
_MAP_VERBS = {"MapGet", "MapPost", "MapPut", "MapDelete", "MapPatch", "MapMethods"}
_VISIBLE = {"public", "protected", "internal"}
# Calls whose string argument is SQL: ADO.NET, Dapper, EF Core, migrations.
SQL_SINKS = re.compile(
    r"\b(SqlCommand|CommandText|Query(?:Async|First\w*|Single\w*|Multiple\w*)?|"
    r"Execute(?:Scalar|Reader)?(?:Async)?|FromSqlRaw|FromSqlInterpolated|FromSql|"
    r"ExecuteSqlRaw(?:Async)?|ExecuteSqlInterpolated(?:Async)?|ExecuteSql(?:Async)?|SqlQuery\w*|Sql)\b"
)
_BUILTIN_TEXT = (
    "Task List IEnumerable IList Dictionary IReadOnlyList string int long bool var object "
    "decimal DateTime Guid CancellationToken ILogger IActionResult ActionResult Func "
    "Action ValueTask void IDbConnection SqlConnection DbContext DbSet Nullable Exception"
)
_BUILTIN_TYPES = set(_BUILTIN_TEXT.split())
# Compiled once: these run for every member, call and string literal.
_XML_TAG = re.compile(r"</?\w+[^>]*>")
_PAREN_SPACE = re.compile(r"\(\s+")
_QUOTES = re.compile(r'^[@$]*"+|"+$')
_INTERFACE_NAME = re.compile(r"I[A-Z]")
_PROC_NAME = re.compile(r"\[?\w+\]?\.\[?usp_\w+\]?|usp_\w+")

_parser: Any = None


def parser() -> Any:
    """The tree-sitter C# parser (loaded on first use)."""
    global _parser
    if _parser is None:
        import tree_sitter
        import tree_sitter_c_sharp

        _parser = tree_sitter.Parser(tree_sitter.Language(tree_sitter_c_sharp.language()))
    return _parser


# Compiled queries find these node types in C; walking every node of a body from Python
# cost most of the extraction time.
_BODY_QUERY = """
(invocation_expression) @call
(object_creation_expression) @new
(assignment_expression) @assign
"""
# Where SQL can sit: literals, concatenations of literals, fields initialised with SQL.
_SQL_QUERY = """
(string_literal) @s
(verbatim_string_literal) @s
(raw_string_literal) @s
(interpolated_string_expression) @s
(binary_expression) @concat
(identifier) @name
"""


@functools.lru_cache(maxsize=4)
def _query_cursor(source: str) -> Any:
    """A cursor over the nodes a query captures in a subtree."""
    import tree_sitter
    import tree_sitter_c_sharp

    language = tree_sitter.Language(tree_sitter_c_sharp.language())
    return tree_sitter.QueryCursor(tree_sitter.Query(language, source))


@functools.lru_cache(maxsize=16)
def parse(text: str) -> Any:
    """The syntax tree of a C# text (cached: classify and extract parse the same file)."""
    return parser().parse(text.encode("utf-8"))


def _source_order(n: Any) -> tuple[int, int, str]:
    """A syntax node's place in a pre-order walk: by start, the enclosing node first."""
    return (n.start_byte, -n.end_byte, n.type)


def _txt(node: Any) -> str:
    return node.text.decode("utf-8", errors="replace") if node is not None else ""


def _doc_before(node: Any) -> str:
    """First meaningful line of the `///` comment block right above a declaration."""
    lines: list[str] = []
    prev = node.prev_named_sibling
    while (
        prev is not None
        and prev.type == "comment"
        and _txt(prev).startswith("///")
        and prev.end_point[0] >= node.start_point[0] - len(lines) - 1
    ):
        lines.insert(0, _txt(prev))
        prev = prev.prev_named_sibling
    for line in lines:
        clean = _XML_TAG.sub("", line.lstrip("/ ")).strip()
        if clean:
            return clean
    return ""


def _visible(node: Any) -> bool:
    """Declared public, protected or internal (part of a type's surface)."""
    return any(m in _VISIBLE for m in _modifiers(node))


def _member_name(node: Any) -> str:
    """The name of a member without a `name` field: `this`, `operator +`, `~T`."""
    named = node.child_by_field_name("name")
    if node.type == "indexer_declaration":
        return "this"
    if node.type == "operator_declaration":
        op = node.child_by_field_name("operator")
        return f"operator {_txt(op)}" if op is not None else "operator"
    if node.type == "conversion_operator_declaration":
        kind = next((_txt(c) for c in node.children if _txt(c) in ("implicit", "explicit")), "")
        target = node.child_by_field_name("type")
        return f"{kind} operator {_txt(target)}".strip()
    if node.type == "destructor_declaration":
        return f"~{_txt(named)}"
    return _txt(named)


def _first_string(call: Any) -> str | None:
    """The first argument of a call when it is a string literal (a route)."""
    args = call.child_by_field_name("arguments")
    first = args.named_children[0] if args is not None and args.named_children else None
    value = first.named_children[-1] if first is not None and first.named_children else None
    return _string_value(value) if value is not None and _string_value(value) else None


def _join_route(prefix: str, route: str) -> str:
    """`api/catalog` + `/items/{id}` -> `/api/catalog/items/{id}`."""
    parts = [p.strip("/") for p in (prefix, route) if p.strip("/")]
    return "/" + "/".join(parts)


def _signature(node: Any) -> str:
    """The declaration up to its body, on one line."""
    body = node.child_by_field_name("body")
    if body is None:
        for child in node.named_children:
            if child.type in (
                "declaration_list",
                "block",
                "accessor_list",
                "arrow_expression_clause",
                "enum_member_declaration_list",
            ):
                body = child
                break
    start = node.start_byte
    end = body.start_byte if body is not None else node.end_byte
    raw = node.text[: end - start].decode("utf-8", errors="replace")
    sig = _PAREN_SPACE.sub("(", " ".join(raw.split()).rstrip("{ =>"))
    if node.type == "property_declaration" and body is not None and body.type == "accessor_list":
        sig += " " + " ".join(_txt(body).split())
    return sig


def _modifiers(node: Any) -> list[str]:
    return [_txt(c) for c in node.named_children if c.type == "modifier"]


def _type_names(node: Any) -> list[str]:
    """Simple type names mentioned in a type node (generic arguments included)."""
    out: list[str] = []
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type == "identifier":
            out.append(_txt(n))
        elif n.type == "qualified_name":
            out.append(_txt(n).split(".")[-1])
            continue
        stack.extend(reversed(n.named_children))
    return out


def _variable_declaration(field: Any) -> Any:
    """The `variable_declaration` of a field (None when a broken file has none)."""
    return next((c for c in field.named_children if c.type == "variable_declaration"), None)


def _field_type(field: Any) -> Any:
    """The type node of a field declaration, if it has one."""
    decl = _variable_declaration(field)
    return decl.child_by_field_name("type") if decl is not None else None


def _declarators(field: Any) -> list[Any]:
    """The declared variables of a field (`int a = 1, b;` -> a, b); none when broken."""
    decl = _variable_declaration(field)
    if decl is None:
        return []
    return [c for c in decl.named_children if c.type == "variable_declarator"]


def _string_value(node: Any) -> str:
    if node.type in (
        "string_literal",
        "verbatim_string_literal",
        "raw_string_literal",
        "interpolated_string_expression",
    ):
        return _QUOTES.sub("", _txt(node))
    return ""


def _symbol(node: Any, kind: str, name: str, qn: str, parent: str | None) -> Symbol:
    """A C# symbol for a declaration node."""
    return Symbol(
        kind,
        name,
        qn,
        "dotnet",
        node.start_point[0] + 1,
        node.end_point[0] + 1,
        signature=_signature(node),
        doc=_doc_before(node),
        text=_txt(node),
        parent=parent,
        metadata={"modifiers": _modifiers(node)},
    )


class _Walker:
    def __init__(self, text: str) -> None:
        self.text = text
        self.symbols: list[Symbol] = []
        self.deps: list[Dependency] = []
        self.usings: list[str] = []
        self.sql_fields: dict[str, str] = {}  # field name -> SQL string it is initialised with
        self.declared: dict[str, int] = {}  # member name -> how many were declared so far
        self.program_seen = False

    def walk(self, node: Any, namespace: str, parent: str | None) -> None:
        for child in node.named_children:
            kind = child.type
            if kind == "using_directive":
                # `global using X;` (GlobalUsings.cs) and `using static X;` name X too.
                words = _txt(child).strip(" ;").split()
                while words and words[0] in ("global", "using", "static"):
                    words.pop(0)
                self.usings.append(" ".join(words).removeprefix("global::"))
            elif kind == "global_statement":
                if not self.program_seen:
                    self.program(node, namespace)
            elif kind == "delegate_declaration":
                self.member(child, "delegate", namespace or None)
            elif kind in _NAMESPACES:
                name = _txt(child.child_by_field_name("name"))
                qn = f"{namespace}.{name}" if namespace else name
                if not any(s.qualified_name == qn and s.kind == "namespace" for s in self.symbols):
                    self.symbols.append(
                        Symbol(
                            "namespace",
                            name,
                            qn,
                            "dotnet",
                            child.start_point[0] + 1,
                            child.end_point[0] + 1,
                            signature=f"namespace {qn}",
                        )
                    )
                if kind == "file_scoped_namespace_declaration":
                    self.walk(child, qn, parent)
                    namespace = qn  # later siblings belong to the file-scoped namespace
                else:
                    body = child.child_by_field_name("body")
                    self.walk(body if body is not None else child, qn, parent)
            elif kind in _TYPES:
                self.type_decl(child, _TYPES[kind], namespace, parent)
            elif kind == "declaration_list":
                self.walk(child, namespace, parent)

    def type_decl(self, node: Any, kind: str, namespace: str, parent: str | None) -> None:
        name = _txt(node.child_by_field_name("name"))
        owner = parent or namespace
        qn = f"{owner}.{name}" if owner else name
        sym = _symbol(node, kind, name, qn, parent or (namespace or None))
        self.symbols.append(sym)
        for child in node.named_children:
            if child.type == "base_list":
                for i, base in enumerate(child.named_children):
                    names = _type_names(base)
                    if not names:
                        continue
                    # Convention: I-prefixed names are interfaces; the first non-interface is the base.
                    head = names[0]
                    edge = (
                        "Implements"
                        if (kind == "interface" or (_INTERFACE_NAME.match(head) and i >= 0))
                        else "Inherits"
                    )
                    self.deps.append(Dependency(qn, head, edge, base.start_point[0] + 1))
                    for generic in names[1:]:
                        self.deps.append(
                            Dependency(qn, generic, "References", base.start_point[0] + 1)
                        )
            elif child.type == "parameter_list":
                # A record's positional parameters are its properties; a class's or struct's
                # primary constructor parameters are injected (C# 12).
                self.params(child, qn, inject=kind != "record")
                sym.metadata["primary_constructor"] = [
                    _txt(p.child_by_field_name("name"))
                    for p in child.named_children
                    if p.type == "parameter"
                ]
        body = node.child_by_field_name("body")
        members = body.named_children if body is not None else []
        for member in members:  # first: fields holding SQL, used by any member
            if member.type == "field_declaration":
                for decl in _declarators(member):
                    value = decl.named_children[-1] if decl.named_children else None
                    text = value is not None and (_string_value(value) or _concatenation(value))
                    if text and tsql.sql_evidence(text):
                        self.sql_fields[_txt(decl.child_by_field_name("name"))] = text
        in_interface = kind == "interface"
        for member in members:
            if member.type in _TYPES:
                self.type_decl(member, _TYPES[member.type], namespace, qn)
            elif member.type in _MEMBERS:
                self.member(member, _MEMBERS[member.type], qn)
            elif member.type in _OTHER_MEMBERS:
                self.member(member, _OTHER_MEMBERS[member.type], qn, _member_name(member))
            elif member.type in ("field_declaration", "event_field_declaration"):
                for t in _type_names(_field_type(member)) if _field_type(member) else []:
                    if t not in _BUILTIN_TYPES and t != name:
                        self.deps.append(Dependency(qn, t, "References", member.start_point[0] + 1))
                if _visible(member) or in_interface or member.type == "event_field_declaration":
                    self.fields(member, qn)  # part of the type's surface: a symbol each
                else:
                    sym.metadata["fields"] = sym.metadata.get("fields", 0) + 1

    def params(self, plist: Any, qn: str, inject: bool) -> None:
        for p in plist.named_children:
            if p.type != "parameter":
                continue
            type_node = p.child_by_field_name("type")
            names = _type_names(type_node) if type_node is not None else []
            for i, t in enumerate(names):
                if t not in _BUILTIN_TYPES and not qn.startswith(f"{t}.") and f".{t}." not in qn:
                    # The parameter's own type is injected; its generic arguments are references.
                    edge = "Injects" if inject and i == 0 else "References"
                    self.deps.append(Dependency(qn, t, edge, p.start_point[0] + 1))

    def fields(self, node: Any, owner: str) -> None:
        """A symbol per declared name of a visible field or event field (`public const int
        A = 1, B = 2;` -> A and B), its signature without the initializer."""
        type_node = _field_type(node)
        mods = " ".join(_modifiers(node))
        head = ("event " if node.type == "event_field_declaration" else "") + _txt(type_node)
        kind = "event" if node.type == "event_field_declaration" else "field"
        for decl in _declarators(node):
            name = _txt(decl.child_by_field_name("name"))
            value = decl.named_children[-1] if len(decl.named_children) > 1 else None
            sig = f"{mods} {head} {name}".strip() + (" = …" if value is not None else "") + ";"
            sym = _symbol(node, kind, name, f"{owner}.{name}", owner)
            sym.signature = " ".join(sig.split())
            self.symbols.append(sym)

    def program(self, unit: Any, namespace: str) -> None:
        """Top-level statements (Program.cs): one `program` node, Program.Main, spanning them."""
        self.program_seen = True
        statements = [c for c in unit.named_children if c.type == "global_statement"]
        first, last = statements[0], statements[-1]
        text = self.text.encode("utf-8")[first.start_byte : last.end_byte].decode(
            "utf-8", "replace"
        )
        lines = last.end_point[0] - first.start_point[0] + 1
        sym = Symbol(
            "program",
            "Program",
            "Program.Main",
            "dotnet",
            first.start_point[0] + 1,
            last.end_point[0] + 1,
            signature=f"top-level statements ({lines} line(s))",
            doc=_doc_before(first),
            text=text,
            metadata={"modifiers": []},
        )
        self.symbols.append(sym)
        for statement in statements:
            self.body_refs(statement, sym.qualified_name, sym)

    def member(self, node: Any, kind: str, owner: str | None, name: str | None = None) -> None:
        name = name or _txt(node.child_by_field_name("name"))
        qn = f"{owner}.{name}" if owner else name
        if kind == "constructor":
            qn = f"{owner}.{name}.ctor"
        # Overloads stay distinct and stable by order: M, M#2, M#3 (a count per name, not a
        # scan of every symbol so far, which was quadratic in a file's members).
        count = self.declared.get(qn, 0) + 1
        self.declared[qn] = count
        if count > 1:
            qn = f"{qn}#{count}"
        sym = _symbol(node, kind, name, qn, owner)
        self.symbols.append(sym)
        plist = node.child_by_field_name("parameters") or next(
            (
                c
                for c in node.named_children
                if c.type in ("parameter_list", "bracketed_parameter_list")
            ),
            None,
        )
        if plist is not None:
            self.params(plist, qn, inject=kind == "constructor")
        type_node = node.child_by_field_name("type") or node.child_by_field_name("returns")
        if type_node is not None:
            for t in _type_names(type_node):
                if t not in _BUILTIN_TYPES:
                    self.deps.append(Dependency(qn, t, "References", node.start_point[0] + 1))
        self.body_refs(node, qn, sym)

    def route_group(self, call: Any, groups: dict[str, str]) -> None:
        """`var api = app.MapGroup("api/catalog")...`: api's routes start with api/catalog."""
        route = _first_string(call)
        holder = call.parent
        while holder is not None and holder.type not in (
            "variable_declarator",
            "assignment_expression",
        ):
            if holder.type in ("block", "global_statement", "expression_statement"):
                return
            holder = holder.parent
        if holder is None or route is None:
            return
        target = holder.child_by_field_name("name") or holder.child_by_field_name("left")
        receiver = call.child_by_field_name("function")
        outer = receiver.child_by_field_name("expression") if receiver is not None else None
        prefix = groups.get(_txt(outer), "") if outer is not None else ""
        groups[_txt(target)] = _join_route(prefix, route)

    def endpoint(self, call: Any, verb: str, fn: Any, owner: str, groups: dict[str, str]) -> None:
        """`app.MapGet("/items/{id}", GetItemById)`: an `endpoint` node under the member that
        maps it, a Calls edge to its handler (a method group, or what a lambda calls)."""
        if (
            fn is None
            or fn.type != "member_access_expression"
            or owner.split(".")[-1] in _MAP_VERBS
        ):
            return  # a Map* wrapper's own body (CleanArchitecture's MapGet(handler, pattern))
        # The route is the first string argument (`MapGet("/items", H)`, or after the handler
        # in wrappers such as `MapPut(H, "{id}")`); the handler, the first method group or
        # lambda.
        route: str | None = None
        handler = ""
        handler_node = None
        args = call.child_by_field_name("arguments")
        for arg in args.named_children if args is not None else []:
            value = arg.named_children[-1] if arg.named_children else None
            if value is None:
                continue
            if route is None and _string_value(value):
                route = _string_value(value)
            elif not handler and value.type in (
                "identifier",
                "member_access_expression",
                "generic_name",
            ):
                handler = _txt(value).split(".")[-1].split("<", 1)[0]
            elif not handler and value.type in ("lambda_expression", "anonymous_method_expression"):
                handler, handler_node = "lambda", value
        if route is None and not handler:
            return
        receiver = fn.child_by_field_name("expression")
        full = _join_route(groups.get(_txt(receiver), ""), route or "")
        method = verb.removeprefix("Map").upper() if verb != "MapMethods" else "METHODS"
        name = f"{method} {full}"
        qn = f"{owner}.{name}"
        count = self.declared.get(qn, 0) + 1  # the same route mapped twice (API versions)
        self.declared[qn] = count
        if count > 1:
            qn = f"{qn}#{count}"
        line = call.start_point[0] + 1
        sym = Symbol(
            "endpoint",
            name,
            qn,
            "dotnet",
            line,
            call.end_point[0] + 1,
            signature=f"{name} -> {handler}" if handler else name,
            text=_txt(call),
            parent=owner,
            metadata={"method": method, "route": full, "handler": handler, "modifiers": ["public"]},
        )
        self.symbols.append(sym)
        if handler and handler != "lambda":
            self.deps.append(Dependency(qn, handler, "Calls", line))
        elif handler_node is not None:
            self.body_refs(handler_node, qn, sym)

    def body_refs(self, node: Any, qn: str, sym: Symbol) -> None:
        sink_seen = False
        groups: dict[str, str] = {}  # route group variable -> its route prefix
        found = _query_cursor(_BODY_QUERY).captures(node)
        # Outer before inner where nodes start together (a call chain's invocations): the
        # captures' own order varied from one call to the next, and so did the deps' order.
        for n in sorted((n for nodes in found.values() for n in nodes), key=_source_order):
            line = n.start_point[0] + 1
            if n.type == "invocation_expression":
                fn = n.child_by_field_name("function")
                callee = (
                    _txt(fn.child_by_field_name("name"))
                    if fn is not None and fn.type == "member_access_expression"
                    else _txt(fn)
                )
                callee = callee.split("<", 1)[0]
                if callee and callee != "nameof":
                    self.deps.append(Dependency(qn, callee, "Calls", line))
                if callee in _MAP_VERBS:
                    self.endpoint(n, callee, fn, qn, groups)
                elif callee == "MapGroup":
                    self.route_group(n, groups)
                if SQL_SINKS.search(_txt(fn)):
                    sink_seen = True
            elif n.type == "object_creation_expression":
                t = n.child_by_field_name("type")
                names = _type_names(t) if t is not None else []
                if names and names[0] not in _BUILTIN_TYPES:
                    self.deps.append(Dependency(qn, names[0], "Creates", line))
                if names and names[0] == "SqlCommand":
                    sink_seen = True
            elif "CommandText" in _txt(n.child_by_field_name("left")):
                sink_seen = True
        if sink_seen:
            # SQL often sits in a local (`const string sql = @"..."`) before reaching the call.
            sql_objects = self.sql_in(node, qn, node.start_point[0] + 1)
            if sql_objects:
                sym.metadata["sql_objects"] = sorted(set(sql_objects))

    def sql_in(self, node: Any, qn: str, line: int) -> list[str]:
        found: list[str] = []
        captured = _query_cursor(_SQL_QUERY).captures(node)
        for n in sorted((n for ns in captured.values() for n in ns), key=_source_order):
            value = _string_value(n) or _concatenation(n)
            if not value and n.type == "identifier" and _txt(n) in self.sql_fields:
                value = self.sql_fields[_txt(n)]
            if value and tsql.sql_evidence(value):
                refs = tsql.references(value)
                for name in refs.reads + refs.writes + refs.executes:
                    self.deps.append(Dependency(qn, name, "UsesSql", line))
                    found.append(name)
            elif value and _PROC_NAME.fullmatch(value.strip()):
                name = tsql.normalize(value.strip())  # a stored procedure name alone
                self.deps.append(Dependency(qn, name, "UsesSql", line))
                found.append(name)
        return found


def _concatenation(node: Any) -> str:
    """The text of `"a" + "b" + ...` when every operand is a string literal."""
    if node.type != "binary_expression" or "+" not in _txt(node):
        return ""
    parts: list[str] = []
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type == "binary_expression":
            stack.extend(reversed(n.named_children))
        elif _string_value(n):
            parts.append(_string_value(n))
        else:
            return ""
    return "".join(parts)


def extract(text: str) -> tuple[list[Symbol], list[Dependency], list[str], bool]:
    """Symbols, dependencies and usings of a C# file, and whether the tree has errors."""
    tree = parse(text)
    walker = _Walker(text)
    walker.walk(tree.root_node, "", None)
    return walker.symbols, list(dict.fromkeys(walker.deps)), walker.usings, tree.root_node.has_error


def embedded_sql_count(text: str) -> int:
    """String literals with SQL passed to a data-access call (regex pass, no parse)."""
    count = 0
    for m in SQL_SINKS.finditer(text):
        window = text[m.end() : m.end() + 1500]
        lit = re.search(r'[@$]{0,2}("""|")(.*?)\1', window, re.S)
        if lit and (
            tsql.sql_evidence(lit.group(2))
            or (
                re.fullmatch(r"\[?\w+\]?\.\[?\w+\]?", lit.group(2).strip())
                and "CommandType.StoredProcedure" in window[:400]
            )
        ):
            count += 1
    return count
