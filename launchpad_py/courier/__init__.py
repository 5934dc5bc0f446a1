"""Courier: serve a Python object's public methods over RPC, and call them.

Usable alone::

    from launchpad_py import courier
    with courier.Server(Counter()) as server:
        client = courier.Client(server.address)
        client.increment()

The bottom layer: imports nothing else of ``launchpad_py`` (not even ``errors``), so
it can be used, tested and moved on its own.
"""

import os as _os

# gRPC's core logs connection chatter (e.g. GOAWAY on a normal server stop) at INFO;
# keep only errors unless the user asked for more.
_os.environ.setdefault('GRPC_VERBOSITY', 'ERROR')

# Server and client
from launchpad_py.courier.client import Client
from launchpad_py.courier.client import list_methods
from launchpad_py.courier.server import Server

# The secret callers prove (see auth.py)
from launchpad_py.courier.auth import default_secret
from launchpad_py.courier.auth import forget_secret
from launchpad_py.courier.auth import register_secret
from launchpad_py.courier.auth import set_default_secret
from launchpad_py.courier.transports.tls import TlsCredentials

# Failing fast on servers that are gone (used when a program stops)
from launchpad_py.courier.fail_fast import fail_fast_on_unavailable

# Batching concurrent calls into one
from launchpad_py.courier.batching import batched_handler

# Errors
from launchpad_py.courier.errors import AuthenticationError
from launchpad_py.courier.errors import CourierCancelledError
from launchpad_py.courier.errors import CourierError
from launchpad_py.courier.errors import CourierTimeoutError
from launchpad_py.courier.errors import CourierUnavailableError
from launchpad_py.courier.errors import RemoteError
from launchpad_py.courier.errors import RemoteTraceback
from launchpad_py.courier.errors import TlsMismatchError
from launchpad_py.courier.errors import UnknownMethodError

# Modules that moved into transports/ (issue 24): ``from launchpad_py.courier import uds`` and
# ``courier.uds`` keep working for one release, with a DeprecationWarning.
_MOVED = {name: f'transports.{name}' for name in (
    'uds', 'uds_server', 'tcp', 'tcp_handshakes', 'tls', 'grpc_client', 'grpc_chunks')}
_MOVED.update({name: f'transports.sockets.{name}' for name in (
    'socket_channel', 'socket_serving', 'reader_handover', 'futures_connection', 'call_future',
    'deadlines')})


def __getattr__(name: str):
    if name not in _MOVED:
        raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
    import importlib
    import warnings
    new = f'{__name__}.{_MOVED[name]}'
    warnings.warn(f'{__name__}.{name} moved to {new}; the old name will be removed in the next '
                  'release', DeprecationWarning, stacklevel=2)
    return importlib.import_module(new)
