"""Certificates for TLS termination: one short-lived CA per run, one leaf per host.

The CA lives only as long as its run and only the run's sandbox trusts it, so a
leaked CA certificate is useless elsewhere and its key never leaves the server.
Leaf keys and certificates go to a private per-run directory because the stdlib
`ssl` module loads certificate chains from files only; that directory is never
mounted into a sandbox.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from airlock.store import private_dir

CA_LIFETIME = datetime.timedelta(hours=24)
LEAF_LIFETIME = datetime.timedelta(hours=24)
# Clocks inside containers and clients drift; a cert "from the future" fails.
BACKDATE = datetime.timedelta(minutes=5)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


class RunCA:
    """A per-run certificate authority that mints and caches leaf contexts by host."""

    def __init__(self, run_id: str, directory: Path) -> None:
        self._dir = private_dir(directory)
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        name = x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Airlock"),
                x509.NameAttribute(NameOID.COMMON_NAME, f"Airlock egress CA {run_id}"),
            ]
        )
        self._ski = x509.SubjectKeyIdentifier.from_public_key(self._key.public_key())
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(now + CA_LIFETIME)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(self._ski, critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self._contexts: dict[str, ssl.SSLContext] = {}

    @property
    def pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def server_context(self, host: str) -> ssl.SSLContext:
        """A server-side context presenting a leaf for `host` (cached per run)."""
        context = self._contexts.get(host)
        if context is None:
            context = self._mint(host)
            self._contexts[host] = context
        return context

    def _mint(self, host: str) -> ssl.SSLContext:
        key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        leaf = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([]))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(now + LEAF_LIFETIME)
            # The subject is empty, so the SAN must be critical (RFC 5280).
            .add_extension(x509.SubjectAlternativeName([_san(host)]), critical=True)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(self._ski),
                critical=False,
            )
            .sign(self._key, hashes.SHA256())
        )
        index = len(self._contexts)
        cert_path = self._dir / f"leaf-{index}.pem"
        key_path = self._dir / f"leaf-{index}.key"
        _write_private(
            key_path,
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
        )
        _write_private(cert_path, leaf.public_bytes(serialization.Encoding.PEM) + self.pem)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["http/1.1"])
        context.load_cert_chain(cert_path, key_path)
        context.sni_callback = _remember_sni
        return context


def _remember_sni(sslobj: ssl.SSLObject, server_name: str | None, _: ssl.SSLContext) -> None:
    # The handshake is the only moment the server sees SNI; keep it for the
    # Host/SNI/CONNECT consistency check of every request in the tunnel.
    sslobj.airlock_sni = server_name  # type: ignore[attr-defined]


def sni_of(sslobj: ssl.SSLObject | None) -> str | None:
    return getattr(sslobj, "airlock_sni", None)


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
