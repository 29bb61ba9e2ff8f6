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
