"""The forms of issue 28 that :func:`redact_credentials` missed, and what it must leave.

Every positive loses its secret (no 8-character run of it stays) and keeps its label;
every negative comes back byte for byte: code that handles secrets by name, hashes,
UUIDs, base64 data, words that merely contain "password" or "token".
"""

from __future__ import annotations

import base64
import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.context import REDACTED, redact_credentials
from contextfold.context._redact import _RULES

_AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
_SESSION = "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQ=="

# (text, the secret that must disappear, a label that must stay)
POSITIVES = [
    (
        '{"Credentials": {"AccessKeyId": "ASIAY34FZKBOKMUTVV7A", '
        f'"SecretAccessKey": "{_AWS_SECRET}", "SessionToken": "{_SESSION}"}}}}',
        _AWS_SECRET,
        '"SecretAccessKey": "',
    ),
    ('"SessionToken": "' + _SESSION + '"', _SESSION, '"SessionToken": "'),
    ('{"AccessKeyId": "AKIAIOSFODNN7EXAMPLE"}', "AKIAIOSFODNN7EXAMPLE", "AccessKeyId"),
    ('export DB_PASSWORD="s3cr3t pw with spaces"', "s3cr3t pw with spaces", "DB_PASSWORD="),
    ("export DB_PASSWORD='Tr0ub4dor&3'", "Tr0ub4dor&3", "export DB_PASSWORD='"),
    ('declare -x DB_PASSWORD="hunter2hunter2"', "hunter2hunter2", 'declare -x DB_PASSWORD="'),
    (
        '"Env": ["PATH=/usr/bin", "POSTGRES_PASSWORD=pg-Secret-42", "PGDATA=/var/lib/pg"]',
        "pg-Secret-42",
        '"POSTGRES_PASSWORD=',
    ),
    ("docker run -e DB_PASSWORD=opensesame42 -p 5432:5432 postgres", "opensesame42", "-e DB_"),
    ("env: HOME=/root DB_PASSWORD=x7y8z9w0 LANG=C", "x7y8z9w0", "DB_PASSWORD="),
    ("postgresql://app:pw-0123456789@db.internal/prod", "pw-0123456789", "postgresql://app:"),
    (
        "Server=db;Database=prod;User Id=sa;password=Pa55-w0rd-x;Encrypt=true",
        "Pa55-w0rd-x",
        ";password=",
    ),
    ("Server=db;Uid=sa;Pwd=Pa55-w0rd-y;", "Pa55-w0rd-y", ";Pwd="),
    ("psql 'host=db user=app password=Zq81mn0pq dbname=prod'", "Zq81mn0pq", " password="),
    ("jdbc:mysql://db/prod?user=app&password=Zq81mn0pr&ssl=true", "Zq81mn0pr", "&password="),
    ("mysql --user=root --password=Zq81mn0ps prod", "Zq81mn0ps", "--password="),
    ("mysql --user root --password Zq81mn0pt prod", "Zq81mn0pt", "--password "),
    ("tool login --api-key 'k3y-v4lue-123456'", "k3y-v4lue-123456", "--api-key '"),
    ("db:\n  host: localhost\n  password: s3cr3t-pw-77\n", "s3cr3t-pw-77", "  password: "),
    ("[database]\npassword = s3cr3t-pw-78\nport = 5432\n", "s3cr3t-pw-78", "password = "),
    ("- db_password: 'q9w8e7r6t5'", "q9w8e7r6t5", "db_password: '"),
    ("secret_key: Ab12Cd34Ef56  # prod", "Ab12Cd34Ef56", "secret_key: "),
    ("GITHUB_TOKEN=gho-not-a-real-shape-123", "gho-not-a-real-shape-123", "GITHUB_TOKEN="),
    ("STRIPE_SECRET=whsec_0123456789abc", "whsec_0123456789abc", "STRIPE_SECRET="),
    ("OPENAI_API_KEY=proj0123456789abcdef", "proj0123456789abcdef", "OPENAI_API_KEY="),
    ('{"slack_token": "T0-B0-secretvalue"}', "T0-B0-secretvalue", '"slack_token": "'),
    ("aws_session_token = FwoGZXIvYXdzEJr0123456789", "FwoGZXIvYXdzEJr0123456789", "token = "),
]

_IMAGE = base64.b64encode(random.Random(7).randbytes(3000)).decode()

NEGATIVES = [
    "def password_reset_view(request):\n    return render(request, 'reset.html')",
    "urlpatterns = [path('reset/', password_reset_view, name='password_reset')]",
    "tokenizer = AutoTokenizer.from_pretrained('gpt2')",
    "max_tokens = 4096\nMAX_TOKENS=4096",
    "self.password = password\nself.token = token",
    "password = None\ntoken: str | None = None",
    "token = tokens[0]",
    "secret = secrets.token_hex(16)",
    "password = request.form['password']",
    "SECRET_KEY = os.environ.get('SECRET_KEY')",
    "export DB_PASSWORD=$(vault read -field=pw secret/db)",
    'export DB_PASSWORD="$DB_PASSWORD"',
    "password: ${DB_PASSWORD}",
    "password: !vault |\n  $ANSIBLE_VAULT;1.1;AES256",
    "connect(host=h, user=u, password=pw)",
    "docker login --password-stdin < pw.txt",
    "gh auth token --hostname github.com",
    "--token-limit 100 --max-tokens 5",
    'declare -x PWD="/home/alice/project"\ndeclare -x OLDPWD="/home/alice"',
    "commit 3f1c2ab9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3 (HEAD -> main)",
    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "id 123e4567-e89b-12d3-a456-426614174000 at 2026-01-01T00:00:00Z",
    f"data:image/png;base64,{_IMAGE}",
    f'{{"type": "image", "data": "{_IMAGE}"}}',
    "The password: a word only you know. Your token: see the docs.",
    "Password reset tokens expire after 24 hours.",
    "api_key: str = Field(description='the key')",
]


@pytest.mark.parametrize(("text", "secret", "label"), POSITIVES)
def test_issue_28_forms_are_masked(text: str, secret: str, label: str) -> None:
    out = redact_credentials(text)
    assert REDACTED in out
    assert label in out
    assert not any(secret[i : i + 8] in out for i in range(len(secret) - 7)), out
    assert redact_credentials(out) == out  # idempotent


@pytest.mark.parametrize("text", NEGATIVES)
def test_ordinary_text_stays_byte_for_byte(text: str) -> None:
    assert redact_credentials(text) == text


_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


@settings(max_examples=200, deadline=None)
@given(
    uuid=st.uuids(),
    sha=st.binary(min_size=20, max_size=32),
    data=st.binary(min_size=1, max_size=600),
)
def test_hashes_uuids_and_base64_stay(uuid: object, sha: bytes, data: bytes) -> None:
    text = (
        f"id={uuid} commit {sha.hex()} sha256:{sha.hex()}\nimage: {base64.b64encode(data).decode()}"
    )
    assert redact_credentials(text) == text


@settings(max_examples=200, deadline=None)
@given(
    shape=st.sampled_from(
        [
            ("export {name}_PASSWORD={value}", "A"),
            ('"{name}SecretAccessKey": "{value}"', "a"),
            ("{name}_TOKEN={value}", "A"),
            ("  {name}_password: {value}", "a"),
            ("--{name}-password={value}", "a"),
            ("host=db {name}=x password={value} dbname=d", "a"),
        ]
    ),
    name=st.text("ABCXYZ", min_size=1, max_size=8),
    value=st.text(_ALNUM + "-_./+", min_size=8, max_size=40).filter(
        lambda v: any(c.isdigit() for c in v) and v[0] not in "-."
    ),
    before=st.text(_ALNUM + " \n", max_size=80),
)
def test_generated_named_secrets_are_masked(
    shape: tuple[str, str], name: str, value: str, before: str
) -> None:
    template, case = shape
    name = name if case == "A" else name.lower()
    text = before + "\n" + template.format(name=name, value=value) + "\n"
    out = redact_credentials(text)
    assert out.startswith(before + "\n")  # no separator in it: nothing to mask
    assert value not in out.splitlines()[-1], out
    assert redact_credentials(out) == out


# The rules as first written, with ``\b`` in front, by a trigger of each; the shipped ones
# start with their literal and check the boundary after it (for speed): same matches.
_BOUNDARY_FIRST = {
    "sk-": r"\bsk-(?=[A-Za-z0-9_\-]*\d)[A-Za-z0-9_\-]{20,}",
    "AKIA": r"\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|AROA|APKA)[A-Z0-9]{16}\b",
    "ghp_": r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})",
    "xox": r"\bxox[abprse]-[A-Za-z0-9\-]{10,}",
    "AIza": r"\bAIza[0-9A-Za-z_\-]{35}",
    "eyJ": r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",
}
_PIECES = ["sk-", "AKIA", "ASIA", "ghp_", "github_pat_", "xoxb-", "AIza", "eyJ", ".", "a"]
_PIECES += ["Z", "7", "_", "-", " ", "é", "\n", "ABCDEFGHIJKLMNOP", "abcdefgh12"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=60))
def test_literal_first_rules_match_as_boundary_first_ones(pieces: list[str]) -> None:
    text = "".join(pieces)
    for trigger, old in _BOUNDARY_FIRST.items():
        (rule,) = [r for r in _RULES if trigger in r.triggers]
        expected = [m.span() for m in re.finditer(old, text)]
        assert [m.span() for m in rule.pattern.finditer(text)] == expected, (trigger, text)
