"""What both socket transports (Unix socket, raw TCP) share, on the client's side and the server's.

A client's channel of framed connections (``socket_channel``, with futures
over one connection in ``futures_connection`` and ``call_future``, bounded by
``deadlines``) and a listener's serving of those connections
(``socket_serving``, handing the reader role over in ``reader_handover``, its accept
thread started by ``first_connection`` when a connection arrives, which also starts
gRPC's serving thread).

May import ``courier``'s frames, messages, stats and errors; no transport module.
"""
