"""Reading a question: kind words, names, informative terms, and the FTS5 query built from them."""

from __future__ import annotations

import functools
import itertools
import re

from runtime.retrieval.words import STOPWORDS, WORD, split_identifier

# Words in a question that name a kind of node ("which stored procedure ..."), with the
# node kinds each names: every object kind of a database project and the C# forms.
# Words people mostly use in another sense are left out ("event", "field", "record" as a
# verb, "variable"): a kind pass over the wrong kind only adds noise to the fusion.
KIND_WORDS: dict[str, tuple[str, ...]] = {
    "procedure": ("procedure",),
    "procedures": ("procedure",),
    "proc": ("procedure",),
    "sproc": ("procedure",),
    "table": ("table",),
    "tables": ("table",),
    "view": ("view",),
    "views": ("view",),
    "trigger": ("trigger",),
    "triggers": ("trigger",),
    "function": ("function",),
    "functions": ("function",),
    "index": ("index",),
    "indexes": ("index",),
    "indices": ("index",),
    "sequence": ("sequence",),
    "sequences": ("sequence",),
    "synonym": ("synonym",),
    "synonyms": ("synonym",),
    "role": ("role",),
    "roles": ("role",),
    "user": ("user",),
    "users": ("user",),
    "login": ("login",),
    "logins": ("login",),
    "schema": ("schema",),
    "schemas": ("schema",),
    "type": ("type",),
    "types": ("type",),
    "partition": ("partition_function", "partition_scheme"),
    "partitions": ("partition_function", "partition_scheme"),
    "partitioned": ("partition_function", "partition_scheme"),
    "filegroup": ("filegroup",),
    "filegroups": ("filegroup",),
    "permission": ("permission",),
    "permissions": ("permission",),
    "grant": ("permission",),
    "grants": ("permission",),
    "membership": ("membership",),
    "memberships": ("membership",),
    "policy": ("security_policy",),
    "policies": ("security_policy",),
    "assembly": ("assembly",),
    "assemblies": ("assembly",),
    "script": ("script",),
    "scripts": ("script",),
    "class": ("class",),
    "classes": ("class",),
    "controller": ("class",),
    "controllers": ("class",),
    "migration": ("class",),
    "migrations": ("class",),
    "interface": ("interface",),
    "interfaces": ("interface",),
    "method": ("method",),
    "methods": ("method",),
    "endpoint": ("endpoint", "method"),
    "endpoints": ("endpoint", "method"),
    "route": ("endpoint",),
    "routes": ("endpoint",),
    "records": ("record",),
    "struct": ("struct",),
    "structs": ("struct",),
    "enum": ("enum",),
    "enums": ("enum",),
    "enumeration": ("enum",),
    "property": ("property",),
    "properties": ("property",),
    "constructor": ("constructor",),
    "constructors": ("constructor",),
}


# Words naming SQL kinds that are never joined with a neighbour into an identifier
# ("stored procedure" is not CommandType.StoredProcedure). Words such as "user" or
# "type" still join ("user name" -> UserName).
_SQL_KIND_WORDS = frozenset(
    w
    for w, kinds in KIND_WORDS.items()
    if set(kinds) & {"procedure", "table", "view", "trigger", "function", "index", "sequence"}
)


def kinds_in(query: str) -> list[str]:
    """Node kinds a question names, in order."""
    return list(
        dict.fromkeys(
            kind for w in re.findall(r"[a-z]+", query.lower()) for kind in KIND_WORDS.get(w, ())
        )
    )


# Words that open a question. A query opening otherwise is a keyword query
# ("customer lifetime value view"), where every kind word is the kind asked for.
_QUESTION_OPENERS = frozenset(
    [
        "how",
        "what",
        "which",
        "where",
        "who",
        "whom",
        "whose",
        "why",
        "when",
        "is",
        "are",
        "does",
        "do",
        "did",
        "can",
        "could",
        "should",
        "would",
        "will",
        "in",
        "on",
        "for",
        "from",
        "by",
        "to",
        "list",
        "show",
        "find",
        "give",
        "tell",
        "explain",
    ]
)
# How far after "which"/"what" the asked kind may stand: "which stored procedure",
# "which user-defined data type", "which repository methods".
_HEAD_WORDS = 4


def asked_kinds(query: str) -> list[str]:
    """Node kinds a question asks for, in order: the kinds it names as what it wants.

    A kind word asks for that kind in the question's head ("Which table type passes ...",
    "What partition scheme ...") or beside a name ("the Orders table"); elsewhere it names
    something the answer works on ("how do I check that a table is empty?" wants a
    procedure, not a table). A keyword query ("customer lifetime value view") has no
    grammar to read: every kind word counts, as in kinds_in.
    """
    words = WORD.findall(query)
    lower = [w.lower() for w in words]
    if not lower or lower[0] not in _QUESTION_OPENERS:
        return kinds_in(query)
    names = {w.lower() for w in named_words(query)}
    asked: list[str] = []
    for i, w in enumerate(lower):
        kinds = KIND_WORDS.get(w, ())
        if not kinds:
            continue
        head = any(
            lower[j] in ("which", "what") for j in range(max(0, i - _HEAD_WORDS), i)
        ) and not any(lower[j] in STOPWORDS - {"which", "what"} for j in _between(lower, i))
        beside = (i > 0 and lower[i - 1] in names) or (i + 1 < len(lower) and lower[i + 1] in names)
        if head or beside:
            asked += kinds
    return list(dict.fromkeys(asked))


def _between(lower: list[str], i: int) -> range:
    """Indexes of the words between the last "which"/"what" before word i and word i."""
    for j in range(i - 1, max(-1, i - _HEAD_WORDS - 1), -1):
        if lower[j] in ("which", "what"):
            return range(j + 1, i)
    return range(0)


def named_words(query: str) -> list[str]:
    """Words a question writes as names: `Orders` mid-sentence, `BasketService`, `usp_X`.

    A capital at the start of the question is grammar, not a name.
    """
    out: list[str] = []
    for i, m in enumerate(WORD.finditer(query)):
        word = m.group(0)
        if (
            "_" in word.strip("_")
            or any(c.isupper() for c in word[1:])
            or (word[0].isupper() and i > 0 and word.lower() not in STOPWORDS)
        ):
            out.append(word)
    return list(dict.fromkeys(out))


_KIND_WORD = re.compile(r"\b(?:" + "|".join(KIND_WORDS) + r")\b", re.I)


def without_kind_words(query: str) -> str:
    """The query without the words naming a node kind ("which stored procedure" -> "which stored")."""
    return _KIND_WORD.sub(" ", query)


def query_terms(query: str) -> tuple[list[str], list[str]]:
    """(word terms, joined-adjacent-word terms) as FTS5 expressions; stop words dropped."""
    terms: list[str] = []
    words: list[str] = []
    for word in WORD.findall(query):
        parts = split_identifier(word)
        # One letter alone is a fragment ("customer's" -> "s"), not a word to search for.
        if not parts or (len(parts) == 1 and (parts[0] in STOPWORDS or len(parts[0]) == 1)):
            words.append("")
            continue
        if len(parts) == 1:
            word = parts[0]
            base = word[:-2]
            if word in IRREGULAR:
                # Porter leaves "sent" as "sent"; the code says Send, SendAll, SendAsync.
                terms.append(f'("{word}" OR "{IRREGULAR[word]}")')
            elif word.endswith("ed") and len(base) > 2 and base[-1] == base[-2]:
                # Porter reads "added" as "ad" but "add" (AddItem) as "add": a base that
                # ends in a doubled letter is searched too.
                terms.append(f'("{word}" OR "{base}")')
            else:
                terms.append(f'"{word}"')
            words.append(word)
        else:
            joined = "".join(parts)
            terms.append(
                f'("{joined}" OR ({" AND ".join(f"{chr(34)}{p}{chr(34)}" for p in parts)}))'
            )
            words.append("")
    # "stored procedure" names a kind of SQL object, not the CommandType.StoredProcedure
    # that every data-access call mentions: words naming SQL kinds are not joined.
    pairs = []
    for a, b in itertools.pairwise(words):
        if a and b and not {a, b} & _SQL_KIND_WORDS:
            pairs.append(f'"{a}{b}"')
            # A verb or plural before the noun: "runs all" spells RunAll, "adds item" AddItem.
            if len(a) > 3 and a.endswith("s") and not a.endswith("ss"):
                pairs.append(f'"{a[:-1]}{b}"')
    return list(dict.fromkeys(terms)), list(dict.fromkeys(pairs))


# Irregular past forms a question uses where code names the verb ("how are webhooks sent"
# -> SendAll, "where is it written" -> Write): Porter stems regular inflections only. Forms
# that are also common nouns or the base itself (read, set, put, run, left) are left out,
# and those whose base is a stop word (done, found, got, shown, told).
IRREGULAR = {
    "sent": "send",
    "built": "build",
    "written": "write",
    "wrote": "write",
    "made": "make",
    "kept": "keep",
    "thrown": "throw",
    "threw": "throw",
    "taken": "take",
    "took": "take",
    "held": "hold",
    "sold": "sell",
    "bought": "buy",
    "paid": "pay",
    "lost": "lose",
    "chosen": "choose",
    "given": "give",
    "gave": "give",
    "spent": "spend",
    "brought": "bring",
    "caught": "catch",
    "drawn": "draw",
    "known": "know",
    "begun": "begin",
    "began": "begin",
    "sought": "seek",
    "hidden": "hide",
    "driven": "drive",
    "fed": "feed",
}


def word_stem(word: str) -> str:
    """A word without its inflection, to compare a question's words with a name's parts.

    Deliberately small and the same on both sides ("faked", "fakes" and "fake" -> "fak";
    "runs" -> "run"; "added" -> "add"): it only decides which name parts a question says.
    """
    w = word.lower()
    w = IRREGULAR.get(w, w)
    if len(w) > 4 and w.endswith("ies"):
        w = w[:-3] + "y"
    elif len(w) > 3 and w.endswith("s") and not w.endswith("ss"):
        w = w[:-1]
    for suffix in ("ing", "ed"):
        if len(w) > len(suffix) + 2 and w.endswith(suffix):
            w = w[: -len(suffix)]
            # "skipped" -> "skip", "running" -> "run"; not "called", "passed" (a doubled
            # l, s or z belongs to the verb) nor "added" (a two-letter stem is too short).
            if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "lsz":
                w = w[:-1]
            break
    if len(w) > 3 and w.endswith("e"):
        w = w[:-1]
    return w


def question_stems(query: str) -> frozenset[str]:
    """The stems of a question's informative words (identifiers split into their parts),
    read as a name's are (_name_stems)."""
    return frozenset().union(*map(_name_stems, WORD.findall(query)))


def name_cover(name: str, stems: frozenset[str]) -> tuple[int, int]:
    """(parts of a name the question says, informative parts of the name)."""
    parts = _name_stems(name)
    return len(parts & stems), len(parts)


@functools.lru_cache(maxsize=65536)
def _name_stems(name: str) -> frozenset[str]:
    """The stems of a name's informative parts (names recur in every search: cached)."""
    return frozenset(
        word_stem(p) for p in split_identifier(name) if p not in STOPWORDS and len(p) > 1
    )


def fts_query(query: str, mode: str = "any") -> str:
    """An FTS5 MATCH expression: `any` word (or joined pair), `all` words, or `joined` pairs only.

    Each word matches in every identifier spelling; adjacent plain words are also tried
    joined (`basket service` -> `basketservice`), so a query typed as words finds the
    identifier it names.
    """
    terms, pairs = query_terms(query)
    if mode == "joined":
        return " OR ".join(pairs)
    if mode == "all":
        return " AND ".join(terms)
    return " OR ".join(terms + pairs)
