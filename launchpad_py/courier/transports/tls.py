"""Encryption on the wire: TLS with one self-signed certificate per program.

The secret's handshake (``auth.py``) proves who is calling but leaves the
payload readable on the network. ``TlsCredentials`` adds TLS to the raw-TCP
path and to gRPC: both ends hold the same certificate and key, trust only
that certificate, and each requires the other to present it (mutual TLS),
so a man in the middle holds neither. The secret's proof still runs inside.

    creds = courier.TlsCredentials.generate()       # once per program
    server = courier.Server(obj, host=ip, secret=s, tls=creds)
    client = courier.Client(server.address, secret=s, tls=creds)

Hand ``creds`` to the program's processes as the secret travels (never on a
command line); it pickles as its two PEM byte strings.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import ssl
import subprocess
import tempfile

# The name inside the certificate; gRPC checks it instead of the address's host.
SERVER_NAME = 'launchpad_py'
GRPC_CHANNEL_OPTIONS = [('grpc.ssl_target_name_override', SERVER_NAME)]


@dataclasses.dataclass(frozen=True)
class TlsCredentials:
    certificate: bytes  # PEM
    private_key: bytes = dataclasses.field(repr=False)  # PEM

    @classmethod
    def generate(cls, days: int = 30) -> 'TlsCredentials':
        """A fresh P-256 key and self-signed certificate (needs the ``openssl`` command)."""
        if shutil.which('openssl') is None:
            raise RuntimeError('TlsCredentials.generate needs the openssl command; install it '
                               '(apt-get install openssl) or pass your own PEM certificate and key')
        with tempfile.TemporaryDirectory(prefix='lp-tls-') as directory:
            key, cert = os.path.join(directory, 'key.pem'), os.path.join(directory, 'cert.pem')
            subprocess.run(
                ['openssl', 'req', '-x509', '-newkey', 'ec', '-pkeyopt',
                 'ec_paramgen_curve:prime256v1', '-nodes', '-days', str(days),
                 '-subj', f'/CN={SERVER_NAME}', '-addext', f'subjectAltName=DNS:{SERVER_NAME}',
                 '-keyout', key, '-out', cert],
                check=True, capture_output=True)
            with open(cert, 'rb') as c, open(key, 'rb') as k:
                return cls(c.read(), k.read())

    def _load_chain(self, context: ssl.SSLContext) -> None:
        # ssl loads a key only from a file: a private one, removed at once.
        with tempfile.TemporaryDirectory(prefix='lp-tls-') as directory:
            path = os.path.join(directory, 'chain.pem')
            with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), 'wb') as chain:
                chain.write(self.private_key + b'\n' + self.certificate)
            context.load_cert_chain(path)

    def _context(self, purpose: int) -> ssl.SSLContext:
        context = ssl.SSLContext(purpose)
        if purpose == ssl.PROTOCOL_TLS_CLIENT:
            context.check_hostname = False  # Trust is the one certificate, whatever the address.
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cadata=self.certificate.decode())
        self._load_chain(context)
        return context

    def server_context(self) -> ssl.SSLContext:
        return self._context(ssl.PROTOCOL_TLS_SERVER)

    def client_context(self) -> ssl.SSLContext:
        return self._context(ssl.PROTOCOL_TLS_CLIENT)

    def grpc_server_credentials(self) -> grpc.ServerCredentials:
        import grpc  # noqa: PLC0415 (only gRPC's own listener needs it: courier/transports/)
        return grpc.ssl_server_credentials([(self.private_key, self.certificate)],
                                           root_certificates=self.certificate,
                                           require_client_auth=True)

    def grpc_channel_credentials(self) -> grpc.ChannelCredentials:
        import grpc  # noqa: PLC0415 (only gRPC's own channels need it)
        return grpc.ssl_channel_credentials(root_certificates=self.certificate,
                                            private_key=self.private_key,
                                            certificate_chain=self.certificate)
