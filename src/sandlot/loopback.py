"""Whether a host name or address is this machine's loopback: what sandlot trusts as
"on this machine" (a plain-HTTP image registry, a registry that may name local files)."""

from __future__ import annotations

import ipaddress


def is_loopback_host(host: str) -> bool:
    """`localhost`, 127.0.0.0/8 or ::1 (brackets already stripped); not a name that
    merely resolves there."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
