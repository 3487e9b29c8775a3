"""runtime/governance/redaction.py: each kind found and masked, checksums, stability, config."""

from __future__ import annotations

import pytest

from runtime.governance import redaction as r

KEY = r.run_key("run-1", secret="")


def redactor(kinds=r.KINDS, patterns=()):
    return r.build({"kinds": list(kinds), "patterns": list(patterns)}, KEY)


# (kind, text, the value that must be masked) — values that must be found.
FOUND = [
    ("email", "mail jane.doe+ops@example.co.uk now", "jane.doe+ops@example.co.uk"),
    ("email", "<bob@mail.internal.example.org>", "bob@mail.internal.example.org"),
    ("phone", "call +44 20 7946 0958 today", "+44 20 7946 0958"),
    ("phone", "call (555) 123-4567 today", "(555) 123-4567"),
    ("phone", "tel: 555-123-4567.", "555-123-4567"),
    ("card", "visa 4111 1111 1111 1111 ok", "4111 1111 1111 1111"),
    ("card", "mc 5555-5555-5555-4444 ok", "5555-5555-5555-4444"),
    ("card", "amex 378282246310005;", "378282246310005"),
    ("card", '"pan": "6011111111111117"', "6011111111111117"),
    ("card", "wrapped 4111 1111\n1111 1111 here", "4111 1111\n1111 1111"),
    ("card", "pan=4111 1111 1111 1111 12 29", "4111 1111 1111 1111"),
    ("card", "card: 4111 1111 1111 1111\n2026 declined", "4111 1111 1111 1111"),
    ("iban", "to GB82 WEST 1234 5698 7654 32 please", "GB82 WEST 1234 5698 7654 32"),
    ("iban", "iban=DE89370400440532013000", "DE89370400440532013000"),
    ("iban", "FR1420041010050500013M02606.", "FR1420041010050500013M02606"),
    ("secret", "key AKIAIOSFODNN7EXAMPLE in", "AKIAIOSFODNN7EXAMPLE"),
    (
        "secret",
        "t=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",
        "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",
    ),
    ("secret", "xoxb-2400987654-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx", None),
    ("secret", "stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    (
        "secret",
        "OPENAI_KEY sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv",
        "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv",
    ),
    (
        "secret",
        "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
        "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
    ),
    (
        "secret",
        "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    ),
    ("secret", "Authorization: Bearer abcDEF123456ghiJKL789", "abcDEF123456ghiJKL789"),
    ("secret", 'token = "Zm9vYmFyQmF6UXV4MTIzNDU2Nzg5MEFCQ0RFRkdI"', None),
    ("password", "DATABASE_URL=postgres://app:s3cr3tPw@db:5432/app", "s3cr3tPw"),
    ("password", "Server=db;User Id=sa;Password=Hunter2!x;", "Hunter2!x"),
    ("password", "db:\n  password: hunter2\n", "hunter2"),
    ("password", 'db_password = "correct horse battery"', "correct horse battery"),
    ("password", "SMTP_PASSWORD=supersecret\n", "supersecret"),
    ("password", '{"client_secret": "c0ffee-Cake-42"}', "c0ffee-Cake-42"),
    ("password", '<add key="SmtpPassword" value="orders!Shop7" />', "orders!Shop7"),
    ("password", "smtp_pass = 'Tiger#Lily9'", "Tiger#Lily9"),
    ("password", "define('DB_PASSWORD', 'river2Qw$');", "river2Qw$"),
    ("password", 'requests.get(url, auth=("admin", "zebra9Kq!"))', "zebra9Kq!"),
    ("password", 'new NetworkCredential("svc", "dragon7_X")', "dragon7_X"),
    ("password", "mysql -u root -pSummer77! shop < dump.sql", "Summer77!"),
    ("password", "password = WLWTwNcOYsVk9k3KDuxFpYIj9zMB56tU", "WLWTwNcOYsVk9k3KDuxFpYIj9zMB56tU"),
    ("password", "DB_PASSWORD=admin1so04sP#22", "admin1so04sP#22"),
]


@pytest.mark.parametrize(("kind", "text", "value"), FOUND)
def test_each_kind_is_found_and_masked(kind, text, value):
    red = redactor()
    out = red.redact(text)
    if value is not None:
        assert value not in out
    assert f"[{kind.upper()}_" in out
    assert red.counts[kind] >= 1


def test_only_the_configured_kinds_are_masked():
    text = "jane@example.com 4111 1111 1111 1111"
    out = redactor(kinds=["card"]).redact(text)
    assert "jane@example.com" in out and "4111" not in out


# Near misses that must stay as they are.
KEPT = [
    "4111 1111 1111 1112",  # a Luhn-invalid 16-digit number is not a card
    "order 1234567812345678 shipped",  # Luhn-invalid
    "9999 9999 9999 9995",  # Luhn-valid, but no card issuer's prefix
    "DE89370400440532013001",  # IBAN checksum wrong
    "GB82WEST1234569876543",  # IBAN one character short for GB
    "sha = '9fceb02d0ae598e95dc970b74767f19372d61af8'",  # a commit hash
    "password = request.form['password']",
    "token = get_token()",
    "def login(password: str) -> None:",
    'api_key = os.environ["API_KEY"]',
    "password: ${DB_PASSWORD}",
    "version 1.2.3.4567 at 2026-11-26 17:14:43",
    "self.password = password",
    "@decorator\ndef f(): pass",
    "    f(tokens_after=after, token_counter=self._counter)",  # keyword arguments
    "tokenizer: cl100k_base",  # a name containing a keyword
    'TOKEN_MARGIN_ENV = "RUNTIME_TOKEN_MARGIN"',  # an environment variable's name
    'HEADERS = ["api_key", "x-api-key"]',  # two strings in a list
    '_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-_"',
    "compass = 'north-east'",
    "41111111111111112222",  # 20 digits in one run: not a card
    'x = "AAbbCC11DDee22FFgg33HHii44JJkk55"',  # mixed, but 4 bits a character
    "call(password=a+b, user=u)",  # a keyword argument's expression
]


@pytest.mark.parametrize("text", KEPT)
def test_near_misses_are_not_masked(text):
    red = redactor()
    assert red.redact(text) == text and not red.counts


def check_digits(country: str, bban: str) -> list[str]:
    """Every two-digit check that gives a valid IBAN (there is exactly one)."""
    return [f"{n:02d}" for n in range(100) if r.iban_ok(f"{country}{n:02d}{bban}")]


def test_luhn_and_iban_checksums():
    assert r.luhn_ok("4111111111111111")
    # Every other check digit fails, whatever remainder it leaves.
    assert [d for d in "0123456789" if r.luhn_ok("411111111111111" + d)] == ["1"]
    assert [d for d in "0123456789" if r.luhn_ok("555555555555444" + d)] == ["4"]
    assert r.iban_ok("GB82WEST12345698765432") and not r.iban_ok("GB82WEST12345698765433")
    # One check of the hundred is right (mod 97 == 1, not 0 or anything else).
    assert check_digits("GB", "WEST12345698765432") == ["82"]
    assert check_digits("DE", "370400440532013000") == ["89"]


def test_an_iban_needs_its_countrys_length_and_a_known_country():
    # Checksums made valid for the wrong length and for a country with no IBAN.
    short = "WEST1234569876543"  # GB is 22 characters; this makes 21
    assert check_digits("GB", short) == []
    assert check_digits("XX", "12345678901234567890") == []
    assert r.iban_ok("NO9386011117947")  # Norway: 15


def test_overlapping_finds_become_one_placeholder():
    red = redactor(
        kinds=[], patterns=[{"name": "one", "regex": "abc"}, {"name": "two", "regex": "cde"}]
    )
    out = red.redact("xx abcde yy")
    assert len(r.PLACEHOLDER.findall(out)) == 1 and out.endswith("de yy")


def test_the_same_value_gets_the_same_placeholder_and_another_value_another():
    red = redactor()
    a = red.redact("a@example.com b@example.com a@example.com")
    first, second, third = a.split()
    assert first == third != second
    # Another redactor with the same run key (a later step, a resumed run): the same.
    assert redactor().redact("a@example.com") == first
    # Another run: another placeholder.
    other = r.build({"kinds": ["email"]}, r.run_key("run-2", secret=""))
    assert other.redact("a@example.com") != first


def test_the_key_secret_changes_the_placeholders():
    plain = r.build({"kinds": ["email"]}, r.run_key("run-1", secret=""))
    keyed = r.build({"kinds": ["email"]}, r.run_key("run-1", secret="operator key"))
    assert plain.redact("a@example.com") != keyed.redact("a@example.com")


def test_masking_twice_changes_nothing():
    red = redactor(patterns=[{"name": "hexish", "regex": r"[0-9a-f]{6,}"}])
    once = red.redact("card 4111 1111 1111 1111, id deadbeef12")
    assert red.redact(once) == once


def test_a_password_in_a_url_is_a_password_not_an_email():
    out = redactor().redact("amqp://guest:guestpw@rabbit.internal:5672/")
    assert out.startswith("amqp://guest:[PASSWORD_") and out.endswith("@rabbit.internal:5672/")


def test_custom_patterns_mask_with_their_name():
    red = redactor(kinds=[], patterns=[{"name": "employee_id", "regex": r"EMP-\d{6}"}])
    out = red.redact("EMP-123456 and EMP-123456 but EMP-12")
    assert out.count("[EMPLOYEE_ID_") == 2 and "EMP-12" in out and red.counts["employee_id"] == 2


@pytest.mark.parametrize(
    ("value", "code", "path"),
    [
        ({"kinds": ["email", "ssn"]}, "REDACTION_INVALID", ("kinds", 1)),
        ({"patterns": [{"name": "x", "regex": "(unclosed"}]}, "REDACTION_PATTERN_INVALID", None),
        ({"patterns": [{"name": "x", "regex": "(a|aa)+$"}]}, "REDACTION_PATTERN_INVALID", None),
        ({"patterns": [{"name": "x", "regex": "a*"}]}, "REDACTION_PATTERN_INVALID", None),
        ({"patterns": [{"name": "x", "regex": "a" * 501}]}, "REDACTION_PATTERN_INVALID", None),
        ({"patterns": [{"name": "Bad Name", "regex": "a"}]}, "REDACTION_INVALID", None),
        ({"patterns": [{"name": "card", "regex": "a"}]}, "REDACTION_INVALID", None),
    ],
)
def test_bad_configuration_is_reported_with_its_path(value, code, path):
    found = list(r.config_problems(value))
    assert [p.code for p in found] == [code]
    if path:
        assert found[0].path == path
    else:
        assert found[0].path[:2] == ("patterns", 0)


def test_a_good_configuration_has_no_problems():
    assert not list(
        r.config_problems({"kinds": ["email"], "patterns": [{"name": "a", "regex": r"\bX\d+\b"}]})
    )
    assert not list(r.config_problems(True))


@pytest.mark.parametrize(
    ("step", "settings", "expected"),
    [
        (None, None, None),
        (None, False, None),
        (None, True, list(r.KINDS)),
        (True, None, list(r.KINDS)),
        (False, True, None),
        ({"kinds": ["email"]}, {"kinds": ["card"]}, ["email"]),
        (None, {"kinds": ["card"]}, ["card"]),
        (True, {"kinds": ["card"]}, ["card"]),
    ],
)
def test_the_step_value_wins_over_the_settings(step, settings, expected):
    got = r.resolve(step, settings)
    assert (got and got["kinds"]) == expected if expected else got is None


def test_patterns_of_settings_and_step_add_up():
    got = r.resolve(
        {"patterns": [{"name": "b", "regex": "B"}]}, {"patterns": [{"name": "a", "regex": "A"}]}
    )
    assert [p["name"] for p in got["patterns"]] == ["a", "b"]


def test_a_pattern_that_runs_over_its_bound_raises_a_named_timeout(monkeypatch):
    monkeypatch.setattr(r, "PATTERN_TIMEOUT_SECONDS", 0.01)
    red = r.Redactor(
        frozenset(), KEY, (r.Custom("slow", __import__("regex").compile(r"(a|aa)+$")),)
    )
    with pytest.raises(r.PatternTimeoutError) as info:
        red.redact("a" * 60 + "!")
    assert info.value.name == "slow"
