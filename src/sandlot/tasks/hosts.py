"""One `allowed_hosts` entry, checked and put in one spelling (Harbor 0.26's rules), so
that `Example.COM.` and `example.com` are the same host and a URL, a port or a path is
refused where the task is read rather than silently allowing nothing."""

from __future__ import annotations

import ipaddress
import re

from pydantic_core import PydanticCustomError

_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")


def _refuse(message: str) -> PydanticCustomError:
    return PydanticCustomError("allowed_host", message)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def normalize_allowed_host(entry: str) -> str:
    """`entry` lower-cased, without a trailing dot, IPv6 and CIDR ranges compressed.

    Raises: PydanticCustomError naming what is wrong (a URL, a port, a bad wildcard).
    """
    host = entry.strip().lower().rstrip(".")
    if not host:
        raise _refuse("an allowed_hosts entry is empty")
    if "/" in host or ":" in host:
        try:
            network = ipaddress.ip_network(host, strict=True) if "/" in host \
                else ipaddress.ip_network(ipaddress.ip_address(host))
        except ValueError:
            raise _refuse(f"{entry!r} is not a hostname, an IP address or a CIDR range "
                          "(a URL, a port or a path is not allowed: write the host "
                          "alone)") from None
        return network.compressed if "/" in host else str(network.network_address)
    name = host
    if host.startswith("*."):
        name = host[2:]
        if _is_ip(name):
            raise _refuse(f"{entry!r}: a wildcard names hosts, not IP addresses")
    elif "*" in host:
        raise _refuse(f"{entry!r}: a wildcard is a leading '*.' (as in '*.example.com')")
    if _is_ip(name):
        return name
    if not all(_LABEL.fullmatch(label) for label in name.split(".")):
        raise _refuse(f"{entry!r} is not a hostname (letters, digits, '-' and '.'), an IP "
                      "address or a CIDR range")
    return host
