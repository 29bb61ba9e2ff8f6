"""What a sandbox with outbound network may reach: the internet, not the host or its LAN.

A task that opts into the network (`network_mode = "public"`) gets NAT to the outside
(slirp4netns, or the container's bridge). Without a filter that path also reaches every
service the host listens on (its own addresses, a bridge's gateway), the cloud's metadata
service (169.254.169.254) and the host's private network. An nftables table in the
sandbox's own network namespace, installed by sandlot from the host before any outbound
command runs, rejects those (commands inside lack CAP_NET_ADMIN to change it):

1. loopback (the trial's gateway socket) is accepted;
2. DNS (port 53) to the sandbox's own resolvers is accepted, even on the host's addresses;
3. the host's own addresses are rejected;
4. the sandbox's own subnets are accepted (a compose task's services, slirp's network);
5. link-local (cloud metadata), loopback and multicast ranges are rejected, and so are
   private and shared ranges unless the run allows them (`--allow-private-network`, for
   a mirror on the LAN);
6. anything else is accepted, or, for a phase with an allowlist (`network_mode =
   "allowlist"`), only the allowlist's addresses are, and the rest is rejected: an
   allowlist never reopens what the rules above refuse.

The table is replaced in one nft transaction when a phase's network changes, so there
is no moment without a filter.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from sandlot.errors import SandboxError
from sandlot.hostguard import check_private_netns

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: Never the internet, always refused: loopback, link-local (the cloud metadata service at
#: 169.254.169.254), multicast and reserved ranges.
ALWAYS_BLOCKED: tuple[str, ...] = (
    "0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "224.0.0.0/4", "240.0.0.0/4",
    "::1/128", "fe80::/10", "ff00::/8",
)
#: Private and shared (CGNAT) ranges: refused unless the run allows them (a LAN mirror).
PRIVATE_RANGES: tuple[str, ...] = (
    "10.0.0.0/8", "100.64.0.0/10", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7",
)
TABLE = "sandlot_egress"
INSTALL_HINT = "install it with: apt-get install -y nftables"


@dataclass(frozen=True)
class EgressPolicy:
    """The addresses one sandbox's filter is made of."""

    host_addresses: tuple[str, ...]
    own_subnets: tuple[str, ...]
    resolvers: tuple[str, ...]
    allow_private: bool = False
    #: Only these ranges past the rules above (an allowlist); None: the internet.
    allowed: tuple[str, ...] | None = None


def local_v4(fib_trie: str) -> list[str]:
    """The IPv4 addresses a network namespace owns, from its /proc/net/fib_trie."""
    found, last = set(), None
    for line in fib_trie.splitlines():
        text = line.strip()
        if text.startswith("|--"):
            last = text[3:].strip()
        elif text.startswith("/32 host LOCAL") and last:
            found.add(last)
    return sorted(found)


def inet6(if_inet6: str) -> list[tuple[str, int]]:
    """(address, prefix length) of each IPv6 address, from /proc/net/if_inet6."""
    out = []
    for line in if_inet6.splitlines():
        fields = line.split()
        if len(fields) >= 3 and len(fields[0]) == 32:
            hexed = fields[0]
            address = ":".join(hexed[i:i + 4] for i in range(0, 32, 4))
            out.append((str(ipaddress.ip_address(address)), int(fields[2], 16)))
    return out


def connected_v4(route: str) -> list[str]:
    """The directly connected IPv4 subnets (no gateway), from /proc/net/route."""
    out = []
    for line in route.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 8 or fields[2] != "00000000" or fields[1] == "00000000":
            continue
        dest = ipaddress.IPv4Address(int(fields[1], 16).to_bytes(4, "little"))
        mask = ipaddress.IPv4Address(int(fields[7], 16).to_bytes(4, "little"))
        out.append(str(ipaddress.IPv4Network(f"{dest}/{mask}", strict=False)))
    return out


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _split(items: Iterable[str]) -> tuple[list[str], list[str]]:
    """Deduplicated, non-overlapping v4 and v6 networks (nft refuses overlapping elements)."""
    nets: list[IPNetwork] = []
    for item in items:
        try:
            nets.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            continue
    v4 = ipaddress.collapse_addresses(n for n in nets if n.version == 4)  # type: ignore[misc]
    v6 = ipaddress.collapse_addresses(n for n in nets if n.version == 6)  # type: ignore[misc]
    return [str(n) for n in v4], [str(n) for n in v6]


def _rule(family: str, nets: list[str], verdict: str) -> str:
    return f"    {family} daddr {{ {', '.join(nets)} }} {verdict}\n" if nets else ""


@functools.lru_cache(maxsize=64)
def ruleset(policy: EgressPolicy) -> str:
    """The nft script for `policy` (replaces an earlier table of the same name).

    Kept per policy: the sandboxes of a job mostly share one (the host's addresses are
    read again for each, and a new address makes a new policy), and splitting the
    ranges with `ipaddress` took several ms of the event loop per sandbox.
    """
    host4, host6 = _split(f"{a}/{32 if ':' not in a else 128}" for a in policy.host_addresses)
    own4, own6 = _split(policy.own_subnets)
    dns4, dns6 = _split(policy.resolvers)
    blocked4, blocked6 = _split(
        ALWAYS_BLOCKED + (() if policy.allow_private else PRIVATE_RANGES))
    rules = '    oifname "lo" accept\n'
    for family, dns in (("ip", dns4), ("ip6", dns6)):
        if dns:
            rules += f"    {family} daddr {{ {', '.join(dns)} }} meta l4proto {{ tcp, udp }} " \
                     "th dport 53 accept\n"
    rules += _rule("ip", host4, "reject") + _rule("ip6", host6, "reject")
    rules += _rule("ip", own4, "accept") + _rule("ip6", own6, "accept")
    rules += _rule("ip", blocked4, "reject") + _rule("ip6", blocked6, "reject")
    if policy.allowed is not None:
        allowed4, allowed6 = _split(policy.allowed)
        rules += _rule("ip", allowed4, "accept") + _rule("ip6", allowed6, "accept")
        rules += "    reject\n"
    return (f"table inet {TABLE}\ndelete table inet {TABLE}\n"
            f"table inet {TABLE} {{\n  chain output {{\n"
            "    type filter hook output priority 0; policy accept;\n"
            f"{rules}  }}\n}}\n")


async def _run(argv: list[str], stdin: bytes | None = None) -> str:
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE if stdin is not None else
            asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
    except FileNotFoundError as exc:
        raise SandboxError(f"{exc.filename} not found: the egress filter of a sandbox with "
                           f"network needs nft; {INSTALL_HINT}") from None
    out, err = await proc.communicate(stdin)
    if proc.returncode != 0:
        raise SandboxError(f"{' '.join(argv[:4])}… failed (exit {proc.returncode}): "
                           f"{err.decode(errors='replace').strip()[-400:]}")
    return out.decode(errors="replace")


def policy_for(pid: int, resolvers: Iterable[str], allow_private: bool = False,
               allowed: tuple[str, ...] | None = None) -> EgressPolicy:
    """The host's addresses (read now: bridges come and go) and the own subnets of the
    network namespace process `pid` is in, all from /proc (no `ip` process: this runs
    for every sandbox that goes outbound)."""
    host = local_v4(_read("/proc/net/fib_trie")) + [
        a for a, _ in inet6(_read("/proc/net/if_inet6"))]
    own = connected_v4(_read(f"/proc/{pid}/net/route")) + [
        f"{a}/{n}" for a, n in inet6(_read(f"/proc/{pid}/net/if_inet6"))
        if not ipaddress.ip_address(a).is_loopback]
    return EgressPolicy(host_addresses=tuple(host), own_subnets=tuple(own),
                        resolvers=tuple(resolvers), allow_private=allow_private,
                        allowed=allowed)


async def install(pid: int, resolvers: Iterable[str], allow_private: bool = False,
                  allowed: tuple[str, ...] | None = None) -> EgressPolicy:
    """Install the filter in the network namespace of process `pid` (a sandbox's holder
    or a container's init), replacing the one there; `allowed`: an allowlist's ranges.

    Raises: SandboxError when nft is missing or refuses (the sandbox must not go outbound
    unfiltered).
    """
    check_private_netns(pid)
    policy = policy_for(pid, resolvers, allow_private, allowed)
    await _run(["nsenter", f"--net=/proc/{pid}/ns/net", "nft", "-f", "-"],
               stdin=ruleset(policy).encode())
    return policy


def resolvers_in(resolv_conf: str) -> list[str]:
    """The `nameserver` addresses of a resolv.conf."""
    out = []
    for line in resolv_conf.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "nameserver":
            try:
                out.append(str(ipaddress.ip_address(parts[1].split("%")[0])))
            except ValueError:
                continue
    return out
