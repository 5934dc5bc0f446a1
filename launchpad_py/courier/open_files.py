"""Open files: raise the soft ``RLIMIT_NOFILE`` to the hard limit, and say so when it runs out.

Every courier connection is a descriptor at both ends, so one server with a
thousand clients needs a thousand. Many systems start processes with a soft
limit of 1,024 under a much higher hard limit, which any process may raise
itself to: node processes and launchers do (``raise_soft_limit``), and an
exhausted limit is reported with its numbers (``exhausted``) instead of a
bare ``[Errno 24]``.

    open_files.raise_soft_limit()
    open_files.shortfall(4000, 'launching 1000 nodes')  # why not, if the hard limit is lower

It also keeps a few descriptors aside for starting gRPC's core (``hold_reserve``), which
aborts the process when it cannot open its own. While gRPC starts on them
(``starting_grpc``), the listeners that strangers can reach (the raw-TCP gate, the
gRPC door's relay) take no descriptors (``taking_descriptors``): a flood
of strangers at the raw-TCP port would otherwise take the freed ones first. The
Unix-socket listener does not wait: only this user's processes can reach it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import threading

#: Where the hard limit is unlimited, Linux still caps it at fs.nr_open (1,048,576 by default).
_UNLIMITED_CAP = 1 << 20


def limits() -> tuple[int, int]:
    """(soft, hard) ``RLIMIT_NOFILE`` of this process."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def raise_soft_limit() -> int:
    """Raises the soft limit to the hard one (as far as the kernel allows); the soft limit now."""
    soft, hard = limits()
    target = _UNLIMITED_CAP if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):  # E.g. above fs.nr_open: keep what we have.
            pass
    return limits()[0]


def describe() -> str:
    soft, hard = limits()

    def text(value: int) -> str:
        return 'unlimited' if value == resource.RLIM_INFINITY else str(value)
    return f'the open-file limit (RLIMIT_NOFILE) of this process is {text(soft)}, hard {text(hard)}'


def is_exhausted(exc: BaseException) -> bool:
    """Whether ``exc`` says this process (EMFILE) or the system (ENFILE) is out of descriptors."""
    return isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE)


def exhausted(what: str) -> str:
    """The message for running out while doing ``what``."""
    return (f'{what}: out of file descriptors: {describe()}. Each connection takes one at both '
            'ends; raise the hard limit (ulimit -Hn as root, LimitNOFILE= for a service, '
            '/etc/security/limits.conf) or spread the clients over more processes')


def shortfall(needed: int, who: str) -> str | None:
    """Raises the soft limit; why it is not enough if even the hard one is below ``needed``."""
    if raise_soft_limit() >= needed:
        return None
    return (f'{who} needs about {needed} file descriptors, but {describe()}: raise the hard '
            f'limit (ulimit -Hn {needed} as root, LimitNOFILE= for a service, '
            '/etc/security/limits.conf) or launch fewer nodes from one process')


# Descriptors kept for the start of gRPC's core (see hold_reserve).
_RESERVE = 32
_reserve: list[int] = []
_reserve_lock = threading.Lock()
# Held while gRPC starts on the freed reserve, and by listeners taking descriptors.
_grpc_start = threading.Lock()


def hold_reserve() -> None:
    """Keeps descriptors aside for the start of gRPC in this process.

    gRPC's core aborts the whole process when it cannot open its own descriptors as it
    starts (``pollset_global_init: eventfd: Too many open files``): started on a first
    connection, that could be while strangers hold every descriptor the process may open.
    The reserve (copies of one descriptor: no file of their own) is given back to the
    system just before gRPC starts (``starting_grpc``, in ``grpc_server``)."""
    with _reserve_lock:
        if _reserve:
            return
        try:
            base = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return
        _reserve.append(base)
        while len(_reserve) < _RESERVE:
            try:
                _reserve.append(os.dup(base))
            except OSError:
                break


@contextlib.contextmanager
def starting_grpc():
    """Frees the reserve for gRPC, which starts inside this block.

    The kernel gives the lowest free descriptor to whichever thread asks first, so the
    listeners strangers can reach take none meanwhile (they wait in
    ``taking_descriptors``). If the start fails, the reserve is kept again for the next try."""
    with _grpc_start:
        with _reserve_lock:
            while _reserve:
                os.close(_reserve.pop())
        try:
            yield
        except BaseException:
            hold_reserve()
            raise


@contextlib.contextmanager
def taking_descriptors():
    """Wraps a listener's taking of new descriptors (its ``accept`` of a non-blocking socket:
    a blocking one would hold the start back for as long as nobody dials): not while gRPC
    starts on the reserve."""
    with _grpc_start:
        yield


def _after_fork_in_child() -> None:
    # A child forked while a thread of its parent started gRPC would inherit the lock held,
    # by a thread it does not have: its listeners would wait for ever.
    global _grpc_start, _reserve_lock
    _grpc_start, _reserve_lock = threading.Lock(), threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
