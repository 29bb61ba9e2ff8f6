"""The egress filter's inputs (read from /proc/net) and the nft script made of them."""

from __future__ import annotations

from sandlot.sandbox.egress import (
    EgressPolicy,
    connected_v4,
    inet6,
    local_v4,
    policy_for,
    resolvers_in,
    ruleset,
)

FIB_TRIE = """Main:
  +-- 0.0.0.0/0 3 0 5
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 127.0.0.0/8 2 0 2
           |-- 127.0.0.1
              /32 host LOCAL
     +-- 192.0.2.0/24 2 0 2
           |-- 192.0.2.0
              /24 link UNICAST
           |-- 192.0.2.2
              /32 host LOCAL
        |-- 192.0.2.255
           /32 link BROADCAST
Local:
           |-- 192.0.2.2
              /32 host LOCAL
"""
IF_INET6 = ("fe8000000000000000fc00fffe000001 04 40 20 80     eth0\n"
            "00000000000000000000000000000001 01 80 10 80       lo\n")
ROUTE = ("Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
         "eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"
         "eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
         "eth1\t0000590A\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n")


def test_addresses_and_subnets_come_from_proc_net() -> None:
    assert local_v4(FIB_TRIE) == ["127.0.0.1", "192.0.2.2"]
    assert inet6(IF_INET6) == [("fe80::fc:ff:fe00:1", 64), ("::1", 128)]
    assert connected_v4(ROUTE) == ["192.0.2.0/24", "10.89.0.0/16"]
    assert resolvers_in("# x\nnameserver 10.0.2.3\nnameserver fe80::1%eth0\nsearch a\n") == [
        "10.0.2.3", "fe80::1"]


def test_this_hosts_own_addresses_are_found() -> None:
    policy = policy_for(1, ["10.0.2.3"])
    assert "127.0.0.1" in policy.host_addresses


def test_the_ruleset_orders_dns_host_own_then_ranges() -> None:
    policy = EgressPolicy(host_addresses=("192.0.2.2", "10.89.0.1", "10.89.0.1"),
                          own_subnets=("10.89.0.0/16",), resolvers=("10.89.0.1",))
    script = ruleset(policy)
    lines = [line.strip() for line in script.splitlines()]
    order = [next(i for i, line in enumerate(lines) if line.startswith(prefix))
             for prefix in ('oifname "lo" accept', "ip daddr { 10.89.0.1/32 } meta l4proto",
                            "ip daddr { 10.89.0.1/32, 192.0.2.2/32 } reject",
                            "ip daddr { 10.89.0.0/16 } accept", "ip daddr { 0.0.0.0/8")]
    assert order == sorted(order), script
    assert "10.0.0.0/8" in script and "169.254.0.0/16" in script
    lifted = ruleset(EgressPolicy((), (), (), allow_private=True))
    assert "10.0.0.0/8" not in lifted and "169.254.0.0/16" in lifted
    assert script.startswith("table inet sandlot_egress\ndelete table inet sandlot_egress\n")
