"""Bearer credentials to tenants: API keys, JWTs against a JWKS, and the auth config file.

Real crypto throughout: keys are generated with joserfc, tokens signed with it or crafted by
hand for the attacks joserfc would refuse to produce. The JWKS URL is served by an httpx
transport in the test (the network is not what is under test; the refetch rules are).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from joserfc import jwt
from joserfc.errors import SecurityWarning
from joserfc.jwk import ECKey, Key, OKPKey
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken

from airlock.errors import AuthConfigInvalid
from airlock.server.auth import (
    MAX_TOKEN_LENGTH,
    AirlockAccessToken,
    AirlockTokenVerifier,
    ApiKeyEntry,
    AuthConfig,
    JwtSettings,
    current_tenant,
    generate_api_key,
    hash_api_key,
    load_auth_config,
    tenant_of,
)
from airlock.server.auth.config import tenant_name_problem
from airlock.server.config import DRILL_TENANT, RESERVED_TENANT_PREFIX

NOW = 1_800_000_000
ISSUER = "https://issuer.example"
AUDIENCE = "airlock"
JWKS_URL = "https://issuer.example/.well-known/jwks.json"


# --- helpers --------------------------------------------------------------------------


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64json(obj: object) -> str:
    return b64(json.dumps(obj, separators=(",", ":")).encode())


def claims(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "user-7",
        "azp": "orchestrator",
        "exp": NOW + 600,
        "iat": NOW - 5,
        "nbf": NOW - 5,
        "tenant": "acme",
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def sign(key: Key, alg: str, payload: dict[str, Any], **header: Any) -> str:
    return jwt.encode({"alg": alg, "kid": key.kid, **header}, payload, key, algorithms=[alg])


def write_jwks(path: Path, *keys: Key) -> Path:
    path.write_text(json.dumps({"keys": [k.as_dict(private=False) for k in keys]}))
    return path


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "auth.toml"
    path.write_text(text)
    return path


def problems_of(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(AuthConfigInvalid) as caught:
        load_auth_config(write_config(tmp_path, text))
    return caught.value.problems


def rsa_public_jwk(bits: int) -> dict[str, str]:
    """Built with cryptography: joserfc itself refuses (warns) to make short RSA keys."""
    numbers = rsa.generate_private_key(65537, bits).public_key().public_numbers()
    return {
        "kty": "RSA",
        "n": b64(numbers.n.to_bytes((bits + 7) // 8, "big")),
        "e": b64(numbers.e.to_bytes(3, "big")),
    }


def fixed_clock(at: list[float]) -> Callable[[], float]:
    return lambda: at[0]


@pytest.fixture(scope="module")
def ed_key() -> OKPKey:
    return OKPKey.generate_key("Ed25519", parameters={"kid": "ed-1"})


@pytest.fixture(scope="module")
def ec_key() -> ECKey:
    return ECKey.generate_key("P-256", parameters={"kid": "ec-1"})


@pytest.fixture(scope="module")
def api_key() -> tuple[str, str]:
    return generate_api_key()


@pytest.fixture
def config_path(tmp_path: Path, ed_key: OKPKey, ec_key: ECKey, api_key: tuple[str, str]) -> Path:
    write_jwks(tmp_path / "jwks.json", ed_key, ec_key)
    return write_config(
        tmp_path,
        f"""
[[keys]]
id = "ci-bot"
tenant = "acme"
hash = "{api_key[1]}"
policy = "acme.toml"

[[keys]]
id = "nightly"
tenant = "globex"
hash = "{generate_api_key()[1]}"

[jwt]
issuer = "{ISSUER}"
audience = "{AUDIENCE}"
jwks_file = "jwks.json"
algorithms = ["EdDSA", "Ed25519", "ES256"]
tenant_claim = "tenant"
leeway_s = 30
""",
    )


@pytest.fixture
def verifier(config_path: Path) -> AirlockTokenVerifier:
    return AirlockTokenVerifier(load_auth_config(config_path), clock=lambda: NOW)


# --- API keys -------------------------------------------------------------------------


def test_generated_key_is_alk_plus_32_urlsafe_bytes_and_hash_matches() -> None:
    key, key_hash = generate_api_key()
    assert re.fullmatch(r"alk_[A-Za-z0-9_-]{43}", key)
    assert len(base64.urlsafe_b64decode(key[4:] + "=")) == 32
    assert key_hash == hash_api_key(key)
    assert key_hash == "sha256:" + hashlib.sha256(key.encode()).hexdigest()
    assert generate_api_key()[0] != key


@pytest.mark.anyio
async def test_configured_key_maps_to_its_tenant_without_keeping_the_key(
    verifier: AirlockTokenVerifier, api_key: tuple[str, str]
) -> None:
    token = await verifier.verify_token(api_key[0])
    assert isinstance(token, AirlockAccessToken)
    assert tenant_of(token) == "acme"
    assert (token.client_id, token.key_id, token.scopes) == ("ci-bot", "ci-bot", [])
    assert token.expires_at is None
    assert token.token == api_key[1]
    assert api_key[0] not in repr(token)


@pytest.mark.anyio
@pytest.mark.parametrize(
    "presented",
    [
        "",
        "alk_unknown",
        generate_api_key()[0],
        "alk_" + "A" * MAX_TOKEN_LENGTH,
        "not.a.jwt",
        "ä.b.c",
        "\udcff",
    ],
    ids=["empty", "short", "unconfigured", "overlong", "dotted_garbage", "non_ascii", "surrogate"],
)
async def test_unknown_empty_overlong_or_garbage_token_is_none(
    verifier: AirlockTokenVerifier, presented: str
) -> None:
    assert await verifier.verify_token(presented) is None


@pytest.mark.anyio
async def test_overlong_key_is_refused_even_when_its_hash_is_configured() -> None:
    long_key = "alk_" + "x" * MAX_TOKEN_LENGTH
    config = AuthConfig(keys=(ApiKeyEntry(id="k", tenant="acme", hash=hash_api_key(long_key)),))
    assert await AirlockTokenVerifier(config).verify_token(long_key) is None
    assert await AirlockTokenVerifier(config).verify_token(long_key[:MAX_TOKEN_LENGTH]) is None


@pytest.mark.anyio
async def test_refusal_is_logged_at_info_with_reason_and_without_token(
    verifier: AirlockTokenVerifier, caplog: pytest.LogCaptureFixture
) -> None:
    presented = generate_api_key()[0]
    with caplog.at_level(logging.INFO, logger="airlock.server.auth"):
        assert await verifier.verify_token(presented) is None
    assert [r.levelno for r in caplog.records] == [logging.INFO]
    assert "unknown API key" in caplog.text
    assert presented not in caplog.text
    assert presented[4:20] not in caplog.text


def test_tenant_of_refuses_a_token_from_another_verifier() -> None:
    with pytest.raises(TypeError):
        tenant_of(AccessToken(token="t", client_id="c", scopes=[]))


@pytest.mark.anyio
async def test_current_tenant_reads_the_authenticated_caller(
    verifier: AirlockTokenVerifier, api_key: tuple[str, str]
) -> None:
    assert current_tenant() is None
    token = await verifier.verify_token(api_key[0])
    assert token is not None
    reset = auth_context_var.set(AuthenticatedUser(token))
    try:
        assert current_tenant() == "acme"
    finally:
        auth_context_var.reset(reset)


# --- JWT ------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("which", ["ed25519", "es256"])
async def test_valid_jwt_maps_to_the_tenant_claim(
    verifier: AirlockTokenVerifier, ed_key: OKPKey, ec_key: ECKey, which: str
) -> None:
    key, alg = (ed_key, "Ed25519") if which == "ed25519" else (ec_key, "ES256")
    raw = sign(key, alg, claims(scope="runs:write runs:read"))
    token = await verifier.verify_token(raw)
    assert isinstance(token, AirlockAccessToken)
    assert tenant_of(token) == "acme"
    assert token.client_id == "acme/orchestrator"
    assert token.subject == "user-7"
    assert token.expires_at == NOW + 600
    assert token.resource == AUDIENCE
    assert token.scopes == ["runs:write", "runs:read"]
    assert token.claims is not None and token.claims["iss"] == ISSUER
    assert raw not in repr(token)


@pytest.mark.anyio
async def test_legacy_eddsa_alg_verifies_without_a_warning(
    verifier: AirlockTokenVerifier, ed_key: OKPKey
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SecurityWarning)  # joserfc warns when *signing* EdDSA
        raw = sign(ed_key, "EdDSA", claims())
    token = await verifier.verify_token(raw)  # warnings are errors in this suite
    assert token is not None and tenant_of(token) == "acme"


@pytest.mark.anyio
async def test_list_audience_containing_ours_is_accepted(
    verifier: AirlockTokenVerifier, ed_key: OKPKey
) -> None:
    raw = sign(ed_key, "Ed25519", claims(aud=["other", AUDIENCE]))
    assert await verifier.verify_token(raw) is not None


@pytest.mark.anyio
@pytest.mark.parametrize(
    "overrides",
    [
        {"exp": NOW - 10},
        {"nbf": NOW + 10},
        {"iat": NOW + 10},
    ],
    ids=["exp_just_past", "nbf_just_ahead", "iat_just_ahead"],
)
async def test_clock_skew_within_leeway_is_accepted(
    verifier: AirlockTokenVerifier, ed_key: OKPKey, overrides: dict[str, Any]
) -> None:
    assert await verifier.verify_token(sign(ed_key, "Ed25519", claims(**overrides))) is not None


@pytest.mark.anyio
@pytest.mark.parametrize(
    "overrides",
    [
        {"iss": "https://evil.example"},
        {"iss": None},
        {"aud": "someone-else"},
        {"aud": ["a", "b"]},
        {"aud": None},
        {"exp": NOW - 3600},
        {"exp": None},
        {"exp": "tomorrow"},
        {"nbf": NOW + 3600},
        {"iat": NOW + 3600},
        {"tenant": None},
        {"tenant": "Acme"},
        {"tenant": "local"},
        {"tenant": "airlock-drill"},
        {"tenant": "airlock-ops"},
        {"tenant": "-acme"},
        {"tenant": "a" * 64},
        {"tenant": 7},
        {"tenant": ["acme"]},
    ],
    ids=[
        "wrong_issuer",
        "missing_issuer",
        "wrong_audience",
        "audience_list_without_ours",
        "missing_audience",
        "expired",
        "missing_exp",
        "non_numeric_exp",
        "nbf_in_future",
        "iat_in_future",
        "missing_tenant",
        "uppercase_tenant",
        "reserved_local_tenant",
        "reserved_drill_tenant",
        "reserved_airlock_prefix",
        "tenant_leading_dash",
        "tenant_too_long",
        "tenant_not_string",
        "tenant_list",
    ],
)
async def test_jwt_with_bad_claims_is_none(
    verifier: AirlockTokenVerifier, ed_key: OKPKey, overrides: dict[str, Any]
) -> None:
    assert await verifier.verify_token(sign(ed_key, "Ed25519", claims(**overrides))) is None


@pytest.mark.anyio
async def test_unsigned_alg_none_jwt_is_none(verifier: AirlockTokenVerifier) -> None:
    body = b64json(claims())
    for alg in ("none", "None", "NONE"):
        header = b64json({"alg": alg, "typ": "JWT", "kid": "ed-1"})
        for signature in ("", b64(b"x" * 64)):
            assert await verifier.verify_token(f"{header}.{body}.{signature}") is None


def hs256(secret: bytes, kid: str | None, payload: dict[str, Any]) -> str:
    header = {"alg": "HS256", "typ": "JWT"} | ({"kid": kid} if kid else {})
    signing_input = f"{b64json(header)}.{b64json(payload)}"
    mac = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64(mac)}"


@pytest.mark.anyio
async def test_hs256_signed_with_the_public_key_as_secret_is_none(
    verifier: AirlockTokenVerifier, ed_key: OKPKey, ec_key: ECKey, config_path: Path
) -> None:
    """The key-confusion attack: the public key, public by definition, used as an HMAC key."""
    jwks_bytes = (config_path.parent / "jwks.json").read_bytes()
    for key in (ed_key, ec_key):
        public = key.as_dict(private=False)
        secrets_to_try = [
            key.as_pem(private=False),
            json.dumps(public).encode(),
            base64.urlsafe_b64decode(str(public["x"]) + "=="),
            jwks_bytes,
        ]
        for secret in secrets_to_try:
            for kid in (key.kid, None):
                assert await verifier.verify_token(hs256(secret, kid, claims())) is None


@pytest.mark.anyio
async def test_jwt_with_unknown_kid_is_none(verifier: AirlockTokenVerifier) -> None:
    stranger = OKPKey.generate_key("Ed25519", parameters={"kid": "stranger"})
    assert await verifier.verify_token(sign(stranger, "Ed25519", claims())) is None


@pytest.mark.anyio
async def test_jwt_signed_by_another_key_under_a_known_kid_is_none(
    verifier: AirlockTokenVerifier,
) -> None:
    impostor = OKPKey.generate_key("Ed25519", parameters={"kid": "ed-1"})
    assert await verifier.verify_token(sign(impostor, "Ed25519", claims())) is None


@pytest.mark.anyio
async def test_jwt_without_kid_is_none_when_the_jwks_has_several_keys(
    verifier: AirlockTokenVerifier, ed_key: OKPKey
) -> None:
    raw = jwt.encode({"alg": "Ed25519"}, claims(), ed_key, algorithms=["Ed25519"])
    assert await verifier.verify_token(raw) is None


@pytest.mark.anyio
async def test_tampered_payload_is_none(verifier: AirlockTokenVerifier, ed_key: OKPKey) -> None:
    header, _, signature = sign(ed_key, "Ed25519", claims()).split(".")
    forged = b64json(claims(tenant="globex"))
    assert await verifier.verify_token(f"{header}.{forged}.{signature}") is None


@pytest.mark.anyio
async def test_alg_that_does_not_fit_the_kids_key_is_none(
    verifier: AirlockTokenVerifier, ed_key: OKPKey, ec_key: ECKey
) -> None:
    """An ES256 token naming the Ed25519 key's kid (and the other way round)."""
    _, body, signature = sign(ec_key, "ES256", claims()).split(".")
    header = b64json({"alg": "ES256", "typ": "JWT", "kid": ed_key.kid})
    assert await verifier.verify_token(f"{header}.{body}.{signature}") is None
    _, body, signature = sign(ed_key, "Ed25519", claims()).split(".")
    header = b64json({"alg": "Ed25519", "typ": "JWT", "kid": ec_key.kid})
    assert await verifier.verify_token(f"{header}.{body}.{signature}") is None


@pytest.mark.anyio
async def test_algorithm_outside_the_allowlist_is_none_even_when_signed_correctly(
    tmp_path: Path, ec_key: ECKey
) -> None:
    write_jwks(tmp_path / "jwks.json", ec_key)
    path = write_config(
        tmp_path,
        f'[jwt]\nissuer = "{ISSUER}"\naudience = "{AUDIENCE}"\njwks_file = "jwks.json"\n'
        'algorithms = ["Ed25519"]\n',
    )
    verifier = AirlockTokenVerifier(load_auth_config(path), clock=lambda: NOW)
    assert await verifier.verify_token(sign(ec_key, "ES256", claims())) is None


@pytest.mark.anyio
async def test_crit_header_is_none(verifier: AirlockTokenVerifier, ed_key: OKPKey) -> None:
    """A header extension the verifier does not understand, marked critical (RFC 7515 4.1.11)."""
    header = b64json({"alg": "Ed25519", "kid": ed_key.kid, "crit": ["x-bind"], "x-bind": "a"})
    signing_input = f"{header}.{b64json(claims())}"
    private = ed_key.private_key
    assert isinstance(private, Ed25519PrivateKey)
    signature = b64(private.sign(signing_input.encode()))
    assert await verifier.verify_token(f"{signing_input}.{signature}") is None


# --- JWKS by URL ----------------------------------------------------------------------


class JwksServer:
    """An httpx transport serving a JWKS that the test can rotate; counts fetches."""

    def __init__(self, *keys: Key) -> None:
        self.keys = list(keys)
        self.fetches = 0
        self.status = 200

    def handle(self, request: httpx.Request) -> httpx.Response:
        assert str(request.url) == JWKS_URL
        self.fetches += 1
        body = {"keys": [k.as_dict(private=False) for k in self.keys]}
        return httpx.Response(self.status, json=body)

    @property
    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)


def url_config() -> AuthConfig:
    return AuthConfig.model_validate(
        {
            "jwt": {
                "issuer": ISSUER,
                "audience": AUDIENCE,
                "jwks_url": JWKS_URL,
                "algorithms": ["Ed25519"],
            }
        }
    )


@pytest.mark.anyio
async def test_jwks_url_is_fetched_once_and_cached(ed_key: OKPKey) -> None:
    server = JwksServer(ed_key)
    verifier = AirlockTokenVerifier(url_config(), clock=lambda: NOW, transport=server.transport)
    for _ in range(3):
        assert await verifier.verify_token(sign(ed_key, "Ed25519", claims())) is not None
    assert server.fetches == 1


@pytest.mark.anyio
async def test_concurrent_first_requests_share_one_jwks_fetch(ed_key: OKPKey) -> None:
    server = JwksServer(ed_key)
    verifier = AirlockTokenVerifier(url_config(), clock=lambda: NOW, transport=server.transport)
    raw = sign(ed_key, "Ed25519", claims())
    results: list[AccessToken | None] = []

    async def call() -> None:
        results.append(await verifier.verify_token(raw))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for _ in range(10):
                tg.start_soon(call)
    assert len(results) == 10 and all(r is not None for r in results)
    assert server.fetches == 1


@pytest.mark.anyio
async def test_unknown_kid_refetches_at_most_once_a_minute_then_picks_up_rotation(
    ed_key: OKPKey,
) -> None:
    now = [float(NOW)]
    server = JwksServer(ed_key)
    verifier = AirlockTokenVerifier(
        url_config(), clock=fixed_clock(now), transport=server.transport
    )
    assert await verifier.verify_token(sign(ed_key, "Ed25519", claims())) is not None
    assert server.fetches == 1

    rotated = OKPKey.generate_key("Ed25519", parameters={"kid": "ed-2"})
    raw = sign(rotated, "Ed25519", claims(exp=NOW + 3000))
    now[0] += 30  # the last fetch was 30 s ago: no refetch yet, even for an unknown kid
    assert await verifier.verify_token(raw) is None
    assert server.fetches == 1

    server.keys.append(rotated)
    now[0] += 30  # 60 s after the last fetch: one refetch, and the new key is known
    assert await verifier.verify_token(raw) is not None
    assert server.fetches == 2

    stranger = OKPKey.generate_key("Ed25519", parameters={"kid": "nobody"})
    for _ in range(5):  # a flood of unknown kids costs one fetch a minute, not one each
        now[0] += 5
        assert await verifier.verify_token(sign(stranger, "Ed25519", claims())) is None
    assert server.fetches == 2


@pytest.mark.anyio
async def test_failed_jwks_fetch_refuses_and_keeps_the_keys_held(ed_key: OKPKey) -> None:
    now = [float(NOW)]
    server = JwksServer(ed_key)
    server.status = 503
    verifier = AirlockTokenVerifier(
        url_config(), clock=fixed_clock(now), transport=server.transport
    )
    raw = sign(ed_key, "Ed25519", claims(exp=NOW + 7200))
    assert await verifier.verify_token(raw) is None

    server.status = 200
    now[0] += 60
    assert await verifier.verify_token(raw) is not None

    server.status = 503
    now[0] += 3600  # stale: a refetch is tried, fails, and the held key still works
    assert await verifier.verify_token(raw) is not None
    assert server.fetches == 3


# --- Config loading -------------------------------------------------------------------


def test_example_config_loads_with_paths_relative_to_the_file(
    config_path: Path, api_key: tuple[str, str]
) -> None:
    config = load_auth_config(config_path)
    assert [k.id for k in config.keys] == ["ci-bot", "nightly"]
    assert config.keys[0].hash == api_key[1]
    assert config.policy_for("acme") == config_path.parent / "acme.toml"
    assert config.policy_for("globex") is None
    assert config.tenants == {"acme", "globex"}
    assert config.jwt is not None
    assert config.jwt.jwks_file == config_path.parent / "jwks.json"
    assert config.jwt.algorithms == ("EdDSA", "Ed25519", "ES256")
    assert config.jwt.leeway_s == 30


def test_uppercase_hash_is_normalized(tmp_path: Path) -> None:
    _, key_hash = generate_api_key()
    path = write_config(
        tmp_path, f'[[keys]]\nid = "k"\ntenant = "acme"\nhash = "{key_hash.upper()}"\n'
    )
    assert load_auth_config(path).keys[0].hash == key_hash


def jwt_table(**fields: str) -> str:
    lines = [f'issuer = "{ISSUER}"', f'audience = "{AUDIENCE}"']
    lines += [f"{k} = {v}" for k, v in fields.items()]
    return "[jwt]\n" + "\n".join(lines) + "\n"


def test_both_jwks_file_and_url_is_an_error(tmp_path: Path, ed_key: OKPKey) -> None:
    write_jwks(tmp_path / "jwks.json", ed_key)
    text = jwt_table(jwks_file='"jwks.json"', jwks_url=f'"{JWKS_URL}"', algorithms='["Ed25519"]')
    assert any("only one of jwks_file and jwks_url" in p for p in problems_of(tmp_path, text))


def test_neither_jwks_file_nor_url_is_an_error(tmp_path: Path) -> None:
    problems = problems_of(tmp_path, jwt_table(algorithms='["Ed25519"]'))
    assert any("set jwks_file" in p for p in problems)


@pytest.mark.parametrize("alg", ["HS256", "HS512", "none", "None", "RS1", ""])
def test_forbidden_or_unknown_algorithm_is_an_error_naming_it(tmp_path: Path, alg: str) -> None:
    text = jwt_table(jwks_url=f'"{JWKS_URL}"', algorithms=f'["ES256", "{alg}"]')
    problems = problems_of(tmp_path, text)
    assert len(problems) == 1
    assert problems[0].startswith("jwt.algorithms[1]: ")
    assert (repr(alg) if alg.lower() != "none" else "'none'") in problems[0]


def test_empty_algorithm_list_is_an_error(tmp_path: Path) -> None:
    problems = problems_of(tmp_path, jwt_table(jwks_url=f'"{JWKS_URL}"', algorithms="[]"))
    assert [p.split(":")[0] for p in problems] == ["jwt.algorithms"]


@pytest.mark.parametrize(
    "tenant",
    ["Acme", "-acme", "a" * 64, "ac me", "local", "ümlaut", "airlock-drill", "airlock-x"],
)
def test_bad_tenant_name_is_an_error(tmp_path: Path, tenant: str) -> None:
    text = f'[[keys]]\nid = "k"\ntenant = "{tenant}"\nhash = "{generate_api_key()[1]}"\n'
    problems = problems_of(tmp_path, text)
    assert len(problems) == 1
    assert problems[0].startswith("keys[0].tenant: ")
    assert "not a tenant name" in problems[0]


def test_duplicate_key_ids_are_an_error(tmp_path: Path) -> None:
    entry = '[[keys]]\nid = "ci-bot"\ntenant = "acme"\nhash = "{}"\n'
    text = entry.format(generate_api_key()[1]) + entry.format(generate_api_key()[1])
    assert problems_of(tmp_path, text) == [
        "keys: id 'ci-bot' is used 2 times; give each key its own id"
    ]


def test_one_key_hash_under_two_ids_is_an_error(tmp_path: Path) -> None:
    key_hash = generate_api_key()[1]
    entry = '[[keys]]\nid = "{}"\ntenant = "acme"\nhash = "{}"\n'
    text = entry.format("a", key_hash) + entry.format("b", key_hash)
    assert any("a, b have the same hash" in p for p in problems_of(tmp_path, text))


def test_one_tenant_with_two_policies_is_an_error(tmp_path: Path) -> None:
    entry = '[[keys]]\nid = "{}"\ntenant = "acme"\nhash = "{}"\npolicy = "{}"\n'
    text = entry.format("a", generate_api_key()[1], "one.toml") + entry.format(
        "b", generate_api_key()[1], "two.toml"
    )
    assert any("different policies" in p for p in problems_of(tmp_path, text))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "no credentials"),
        ('[[keys]]\nid = "k"\ntenant = "acme"\nhash = "alk_secret"\n', "keys[0].hash: not a key"),
        ('[[keys]]\nid = "k"\ntenant = "acme"\n', "keys[0].hash: required but missing"),
        (
            '[[keys]]\nid = "k"\ntenant = "acme"\nkey = "alk_x"\nhash = "sha256:{h}"\n',
            "keys[0].key",
        ),
        ("[jwt]\nissuer = 1\n", "jwt.issuer"),
        (jwt_table(jwks_url='"http://issuer.example/jwks"', algorithms='["ES256"]'), "https"),
        (jwt_table(jwks_url=f'"{JWKS_URL}"', algorithms='["ES256"]', leeway_s="3600"), "leeway"),
        ("not toml [", "not valid TOML"),
    ],
    ids=[
        "empty",
        "raw_key_as_hash",
        "missing_hash",
        "unknown_field",
        "issuer_not_string",
        "plain_http_jwks_url",
        "huge_leeway",
        "bad_toml",
    ],
)
def test_malformed_config_is_an_error_saying_where(
    tmp_path: Path, text: str, expected: str
) -> None:
    text = text.replace("{h}", "0" * 64)
    assert any(expected in p for p in problems_of(tmp_path, text))


def test_loopback_http_jwks_url_is_accepted(tmp_path: Path) -> None:
    text = jwt_table(jwks_url='"http://127.0.0.1:8080/jwks"', algorithms='["ES256"]')
    assert load_auth_config(write_config(tmp_path, text)).jwt is not None


def test_missing_config_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(AuthConfigInvalid, match="cannot read the file"):
        load_auth_config(tmp_path / "absent.toml")


@pytest.mark.parametrize(
    ("jwks", "expected"),
    [
        ({"keys": [OKPKey.generate_key("Ed25519").as_dict(private=True)]}, "private key"),
        ({"keys": [{"kty": "oct", "k": b64(b"secret" * 6)}]}, "'oct' is not accepted"),
        ({"keys": [rsa_public_jwk(1024)]}, "1024 bits"),
        ({"keys": []}, "not a JWKS"),
        ({"keys": [{"kty": "EC", "crv": "P-256", "x": "AA", "y": "AA"}]}, "not a usable key"),
        (
            {
                "keys": [
                    OKPKey.generate_key("Ed25519", parameters={"kid": "x"}).as_dict(private=False),
                    OKPKey.generate_key("Ed25519", parameters={"kid": "x"}).as_dict(private=False),
                ]
            },
            "kid 'x' appears 2 times",
        ),
    ],
    ids=["private", "symmetric", "short_rsa", "empty", "invalid_point", "duplicate_kid"],
)
def test_bad_jwks_file_is_an_error(tmp_path: Path, jwks: dict[str, Any], expected: str) -> None:
    (tmp_path / "jwks.json").write_text(json.dumps(jwks))
    text = jwt_table(jwks_file='"jwks.json"', algorithms='["Ed25519"]')
    problems = problems_of(tmp_path, text)
    assert any(p.startswith("jwt.jwks_file: ") and expected in p for p in problems), problems


def test_every_problem_is_listed_at_once(tmp_path: Path) -> None:
    h1, h2 = generate_api_key()[1], generate_api_key()[1]
    text = f"""
color = "blue"

[[keys]]
id = "ci-bot"
tenant = "Acme"
hash = "{h1}"

[[keys]]
id = "ci-bot"
tenant = "globex"
hash = "{h2}"

[jwt]
issuer = "{ISSUER}"
audience = "{AUDIENCE}"
jwks_file = "missing.json"
jwks_url = "{JWKS_URL}"
algorithms = ["HS256", "none"]
"""
    problems = problems_of(tmp_path, text)
    joined = "\n".join(problems)
    assert "color: unknown key" in joined
    assert "keys[0].tenant: 'Acme' is not a tenant name" in joined
    assert "id 'ci-bot' is used 2 times" in joined
    assert "jwt.algorithms[0]: 'HS256' is not allowed" in joined
    assert "jwt.algorithms[1]: 'none' is not allowed" in joined
    assert "only one of jwks_file and jwks_url" in joined
    assert len(problems) == 6, problems


def test_programmatic_config_runs_the_same_cross_entry_checks() -> None:
    key_hash = generate_api_key()[1]
    entry = ApiKeyEntry(id="dup", tenant="acme", hash=key_hash)
    other = ApiKeyEntry(id="dup", tenant="acme", hash=generate_api_key()[1])
    with pytest.raises(ValueError, match="used 2 times"):
        AuthConfig(keys=(entry, other))
    with pytest.raises(ValueError, match="no credentials"):
        AuthConfig()


@pytest.mark.anyio
async def test_jwks_file_is_read_once_when_the_config_loads(
    config_path: Path, ed_key: OKPKey
) -> None:
    config = load_auth_config(config_path)
    (config_path.parent / "jwks.json").unlink()
    verifier = AirlockTokenVerifier(config, clock=lambda: NOW)
    token = await verifier.verify_token(sign(ed_key, "Ed25519", claims()))
    assert isinstance(token, AirlockAccessToken) and token.tenant == "acme"


def test_programmatic_jwt_settings_refuse_an_unreadable_jwks_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="jwks_file: cannot read"):
        JwtSettings(
            issuer=ISSUER,
            audience=AUDIENCE,
            jwks_file=tmp_path / "missing.json",
            algorithms=("Ed25519",),
        )


def test_the_drills_own_tenant_can_never_be_a_callers() -> None:
    # The usage review leaves DRILL_TENANT's records out: a caller of that name would hide.
    assert DRILL_TENANT.startswith(RESERVED_TENANT_PREFIX)
    assert tenant_name_problem(DRILL_TENANT) is not None
    assert tenant_name_problem("acme-airlock-drill") is None
