"""Courier transports: the ways a client reaches a courier server, each behind one interface.

``interface.py`` says what a transport provides (listen, dial, its address
scheme, its handshake) and ``registry.py`` lists them: gRPC (``grpc_server``,
``grpc_client``, ``grpc_chunks``, its proofs in ``grpc_tokens``, the path
whose port a server's address names), the same-host Unix socket (``uds``,
``uds_server``; large buffers through shared memory) and raw TCP (``tcp``,
its handshake in ``tcp_handshakes``), each optionally under TLS (``tls``).
The two socket paths share ``sockets/`` (a client's channel and a
listener's serving of framed calls).

May import the rest of ``courier`` (frames, messages, auth, stats, errors, ...)
but never ``courier.client``, ``courier.server`` or ``courier.batching``: those
pick from the registry (a contract in ``pyproject.toml``).
"""
