"""TLS on the raw-TCP and gRPC paths: calls work with the program's certificate only."""

from __future__ import annotations

import concurrent.futures
import secrets
import shutil
import threading
import time

import numpy as np
import pytest

from launchpad_py import courier
from launchpad_py.courier.transports import grpc_client

pytestmark = pytest.mark.skipif(shutil.which('openssl') is None,
                                reason='TlsCredentials.generate needs the openssl command')
SECRET = secrets.token_bytes(32)


class Recorder:
    def __init__(self):
        self.calls = 0

    def echo(self, value):
        self.calls += 1
        return value


@pytest.fixture(scope='module')
def credentials():
    return courier.TlsCredentials.generate()


@pytest.fixture
def served(credentials):
    target = Recorder()
    with courier.Server(target, secret=SECRET, tls=credentials) as server:
        yield server, target


@pytest.mark.parametrize('transport', ['tcp', 'grpc'])
def test_calls_work_over_tls(served, credentials, transport):
    """Sync calls, futures and arrays travel over TLS with the program's credentials."""
    server, _ = served
    client = courier.Client(server.address, transport=transport, secret=SECRET,
                            tls=credentials, timeout=20)
    array = np.arange(1 << 20, dtype=np.float32)
    assert client.echo(3) == 3
    assert [client.futures.echo(i) for i in range(8)][-1].result() == 7
    np.testing.assert_array_equal(client.echo(array), array)


@pytest.mark.parametrize('transport', ['tcp', 'grpc'])
def test_a_client_with_another_certificate_is_not_served(served, transport):
    """A client presenting a different certificate fails, and no method runs. (The client
    retries until its deadline, so the test waits out the timeout it gives: 1 s.)"""
    server, target = served
    client = courier.Client(server.address, transport=transport, secret=SECRET, timeout=1,
                            tls=courier.TlsCredentials.generate())
    with pytest.raises(courier.CourierError):
        client.echo(1)
    assert target.calls == 0


def test_a_plaintext_client_is_not_served(served):
    """A client without TLS cannot talk to a TLS server: it fails, and no method runs (after
    its 1 s deadline, as above)."""
    server, target = served
    with pytest.raises(courier.CourierError):
        courier.Client(server.address, transport='tcp', secret=SECRET, timeout=1).echo(1)
    assert target.calls == 0


def test_credentials_pickle_without_their_files(credentials):
    """Credentials travel as their PEM bytes (e.g. in a node's spec)."""
    import pickle
    again = pickle.loads(pickle.dumps(credentials))
    assert again == credentials and b'PRIVATE KEY' in again.private_key
    assert 'PRIVATE' not in repr(credentials)


@pytest.mark.parametrize('tls', [False, True], ids=['plain', 'tls'])
def test_first_call_after_the_server_restarted_takes_a_fresh_connection(credentials, tls):
    """A pooled idle connection whose server went away is replaced before the call is sent,
    over TLS as over plain TCP (TLS connections were not checked: the call failed once)."""
    tls = credentials if tls else None
    first = courier.Server(Recorder(), secret=SECRET, tls=tls, local_transport=False)
    first.start()
    port = int(first.address.rpartition(':')[2])
    client = courier.Client(first.address, transport='tcp', secret=SECRET, tls=tls, timeout=20)
    assert client.echo(1) == 1
    first.stop()
    with courier.Server(Recorder(), port=port, secret=SECRET, tls=tls,
                        local_transport=False) as again:
        assert again.address == first.address
        assert client.echo(2) == 2


def _echo_in_thread(client: courier.Client) -> concurrent.futures.Future:
    """``client.echo(1)`` in a daemon thread: a call that hangs fails the test, not the run."""
    result: concurrent.futures.Future = concurrent.futures.Future()

    def call():
        try:
            result.set_result(client.echo(1))
        except BaseException as exc:
            result.set_exception(exc)

    threading.Thread(target=call, daemon=True).start()
    return result


def _assert_mismatch_fails_at_once(transport, server_tls, client_tls, said: str) -> None:
    """A client without a deadline, holding ``client_tls``, calls a server holding
    ``server_tls``: its call fails within seconds with TlsMismatchError naming the server's
    address and saying ``said``, and no method runs."""
    target = Recorder()
    with courier.Server(target, secret=SECRET, tls=server_tls) as server:
        client = courier.Client(server.address, transport=transport, secret=SECRET,
                                tls=client_tls)
        started = time.monotonic()
        error = _echo_in_thread(client).exception(timeout=20)
        elapsed = time.monotonic() - started
    assert isinstance(error, courier.TlsMismatchError), error
    assert server.address in str(error) and said in str(error), error
    assert elapsed < 10
    assert target.calls == 0


@pytest.mark.parametrize('transport', ['tcp', 'grpc'])
@pytest.mark.parametrize('server_tls, wanted', [(True, 'wants TLS'),
                                                (False, 'does not speak TLS')],
                         ids=['plain_client', 'tls_client'])
def test_a_tls_mismatch_without_deadline_fails_with_a_clear_error(credentials, transport,
                                                                  server_tls, wanted,
                                                                  monkeypatch):
    """A client without a deadline whose TLS setting differs from its server's fails within
    seconds with TlsMismatchError naming the address (its first call waited for ever, in
    gRPC's Endpoints hello), and no method runs. The client looks at why it cannot connect
    every CONNECT_CHECK_S (2 s), which the test shortens: it waited that out four times."""
    monkeypatch.setattr(grpc_client, 'CONNECT_CHECK_S', 0.2)
    server_creds, client_creds = (credentials, None) if server_tls else (None, credentials)
    _assert_mismatch_fails_at_once(transport, server_creds, client_creds, wanted)


@pytest.mark.parametrize('transport', ['tcp', 'grpc'])
@pytest.mark.parametrize('refused_by', ['client', 'server'])
def test_another_programs_certificate_without_deadline_fails_with_a_clear_error(
        credentials, transport, refused_by, monkeypatch):
    """Both ends speak TLS with different credentials, and the client has no deadline: it
    fails within seconds with TlsMismatchError saying which end refused the other's
    certificate (it waited for ever before), and no method runs. 'client': the client does
    not trust the server's certificate; 'server': the client trusts it, but presents one
    the server does not trust. (CONNECT_CHECK_S shortened as above.)"""
    monkeypatch.setattr(grpc_client, 'CONNECT_CHECK_S', 0.2)
    other = courier.TlsCredentials.generate()
    if refused_by == 'server':  # Presents other's certificate, trusts both.
        other = courier.TlsCredentials(other.certificate + credentials.certificate,
                                       other.private_key)
    said = ('presents a certificate that this client' if refused_by == 'client'
            else "refused this client's certificate")
    _assert_mismatch_fails_at_once(transport, credentials, other, said)
