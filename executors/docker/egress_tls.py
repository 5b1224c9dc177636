"""The certificate authority of one session's TLS interception (brokered secrets).

Made when the session's egress starts, with `cryptography`, in the controller's memory: its key
never leaves this process (not to the workspace, not to the sandbox, not even to the egress
proxy). The proxy gets, per brokering host, a leaf certificate and key signed by it; the sandbox
gets only the CA's certificate, to trust (egress.Egress.ca_bundle).
"""
from __future__ import annotations

import datetime
import ssl


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


class SessionCA:
    def __init__(self, session: str, ttl: float = 24 * 3600) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self._x509, self._hashes, self._ser, self._ec, self._oid = x509, hashes, serialization, ec, NameOID
        self.ttl = max(float(ttl), 3600.0) + 3600.0
        self._key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "runner"),
                          x509.NameAttribute(NameOID.COMMON_NAME, f"runner egress CA {session}"[:64])])
        now = _now()
        self._name = name
        self.cert = (x509.CertificateBuilder()
                     .subject_name(name).issuer_name(name)
                     .public_key(self._key.public_key())
                     .serial_number(x509.random_serial_number())
                     .not_valid_before(now - datetime.timedelta(minutes=5))
                     .not_valid_after(now + datetime.timedelta(seconds=self.ttl))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                     .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                                  key_encipherment=False, data_encipherment=False, key_agreement=False,
                                                  key_cert_sign=True, crl_sign=True, encipher_only=False,
                                                  decipher_only=False), critical=True)
                     .add_extension(x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False)
                     .sign(self._key, hashes.SHA256()))
        self.cert_pem = self.cert.public_bytes(serialization.Encoding.PEM).decode("ascii")
        self._leaves: dict[str, dict[str, str]] = {}

    def leaf(self, host: str) -> dict[str, str]:
        """{"cert": PEM, "key": PEM} for `host` (made once per host), signed by this CA."""
        if host in self._leaves:
            return self._leaves[host]
        x509, hashes, ser, ec, NameOID = self._x509, self._hashes, self._ser, self._ec, self._oid
        key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host[:64])]))
                .issuer_name(self._name)
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(seconds=self.ttl - 60))
                .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                               critical=False)
                .sign(self._key, hashes.SHA256()))
        pair = {"cert": cert.public_bytes(ser.Encoding.PEM).decode("ascii"),
                "key": key.private_bytes(ser.Encoding.PEM, ser.PrivateFormat.PKCS8, ser.NoEncryption()).decode("ascii")}
        self._leaves[host] = pair
        return pair


def host_trust_store() -> str:
    """The PEM text of this machine's default trust store ('' when it has no bundle file): what
    the proxy verifies real servers with, and what the sandbox trusts besides the session CA."""
    import os

    paths = ssl.get_default_verify_paths()
    for path in (os.environ.get("SSL_CERT_FILE"), paths.cafile, paths.openssl_cafile,
                 "/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"):
        if path and os.path.isfile(path):
            try:
                with open(path, encoding="ascii", errors="replace") as f:
                    return f.read()
            except OSError:
                continue
    return ""
