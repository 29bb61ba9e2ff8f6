"""Listening sockets inside another network namespace (a sandbox's), created from a thread.

setns(2) changes only the calling thread's namespace, so a short-lived thread joins the
sandbox's namespace, binds and listens, and exits; the socket stays in that namespace.
The gateway then serves it like any other socket: the sandbox reaches 127.0.0.1:PORT and
nothing outside the sandbox can.
"""

from __future__ import annotations

import ctypes
import os
import socket
import threading

CLONE_NEWNET = 0x40000000
#: getsockopt: the 64-bit id of the network namespace a socket lives in (Linux >= 5.14).
SO_NETNS_COOKIE = 71
_libc = ctypes.CDLL(None, use_errno=True)


def listen_in_netns(netns_path: str, host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A listening TCP socket bound to host:port inside the namespace at `netns_path`.

    Raises: OSError if the namespace cannot be entered (needs CAP_SYS_ADMIN) or bound.
    """
    result: dict[str, object] = {}

    def worker() -> None:
        try:
            fd = os.open(netns_path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                if _libc.setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns({netns_path}): {os.strerror(err)}")
            finally:
                os.close(fd)
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(512)
            sock.setblocking(False)
            result["sock"] = sock
        except BaseException as exc:  # handed to the caller's thread
            result["error"] = exc

    thread = threading.Thread(target=worker, name="sandlot-netns-listen", daemon=True)
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    return result["sock"]  # type: ignore[return-value]


def netns_cookie(sock: object) -> int | None:
    """The id of the network namespace `sock` (a socket or asyncio's TransportSocket) lives
    in; None where the kernel cannot tell (older than 5.14)."""
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, SO_NETNS_COOKIE, 8)  # type: ignore[attr-defined]
    except (OSError, AttributeError):
        return None
    return int.from_bytes(raw, "little") if isinstance(raw, bytes) and len(raw) == 8 else None
