"""A private test network of Linux network namespaces: one "host" per namespace, joined by veth
pairs to a bridge that lives in a namespace of its own, on a /24 that the root namespace routes
nowhere (an ``unreachable`` route, added before anything else: an address typo fails here
instead of leaving the machine). :meth:`TestNet.close` removes everything it made, in any state."""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess

__all__ = ["NetnsUnavailable", "TestNet"]

_CMD_TIMEOUT_S = 20


class NetnsUnavailable(Exception):
    """Namespaces cannot be made here (not root, no iproute2, a sandbox that forbids it)."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=_CMD_TIMEOUT_S)
    if check and proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {proc.stderr.strip() or proc.returncode}")
    return proc


class TestNet:
    """``TestNet(tag, "10.203.7.0/24")``; :meth:`add_host` gives each host the next address."""

    __test__ = False  # not a pytest class

    def __init__(self, tag: str, subnet: str) -> None:
        self.tag = tag
        self.net = ipaddress.ip_network(subnet)
        self.hub = f"tl{tag}hub"
        self.namespaces: list[str] = []
        self.hosts: dict[str, str] = {}  # host -> address
        self._route = False

    def setup(self) -> None:
        if os.geteuid() != 0:
            raise NetnsUnavailable("network namespaces need root (run as root, or in a privileged container)")
        if shutil.which("ip") is None:
            raise NetnsUnavailable("iproute2's `ip` is not installed")
        if _ip("route", "show", "exact", str(self.net)).stdout.strip():
            raise NetnsUnavailable(f"{self.net} is already routed here: not a private test subnet")
        route = _ip("route", "add", "unreachable", str(self.net), check=False)
        if route.returncode != 0:
            raise NetnsUnavailable(f"cannot add the unreachable route for {self.net}: {route.stderr.strip()}")
        self._route = True
        made = _ip("netns", "add", self.hub, check=False)
        if made.returncode != 0:
            raise NetnsUnavailable(f"cannot create a network namespace: {made.stderr.strip()}")
        self.namespaces.append(self.hub)
        self.run(self.hub, "ip", "link", "set", "lo", "up")
        self.run(self.hub, "ip", "link", "add", "br0", "type", "bridge")
        self.run(self.hub, "ip", "link", "set", "br0", "up")

    def ns(self, host: str) -> str:
        return f"tl{self.tag}{host}"

    def add_host(self, host: str) -> str:
        """A namespace for ``host`` with ``eth0`` on the bridge; returns its address."""
        ns = self.ns(host)
        _ip("netns", "add", ns)
        self.namespaces.append(ns)
        port = f"v{len(self.hosts)}"
        address = str(self.net.network_address + 10 + len(self.hosts))
        # Both ends made from inside namespaces: nothing of this network exists in the root one.
        self.run(self.hub, "ip", "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
        self.run(self.hub, "ip", "link", "set", port, "master", "br0")
        self.run(self.hub, "ip", "link", "set", port, "up")
        self.run(ns, "ip", "addr", "add", f"{address}/{self.net.prefixlen}", "dev", "eth0")
        self.run(ns, "ip", "link", "set", "eth0", "up")
        self.run(ns, "ip", "link", "set", "lo", "up")
        self.hosts[host] = address
        return address

    def prefix(self, host: str) -> list[str]:
        """The command prefix that starts a process on ``host``."""
        if host not in self.hosts:
            raise ValueError(f"unknown host {host!r}: add_host() it first ({sorted(self.hosts)})")
        return ["ip", "netns", "exec", self.ns(host)]

    def run(self, ns: str, *cmd: str) -> str:
        proc = subprocess.run(
            ["ip", "netns", "exec", ns, *cmd], capture_output=True, text=True, timeout=_CMD_TIMEOUT_S
        )
        if proc.returncode != 0:
            raise RuntimeError(f"in {ns}: {' '.join(cmd)}: {proc.stderr.strip() or proc.returncode}")
        return proc.stdout

    def close(self) -> list[str]:
        """Remove the namespaces (their links go with them) and the route; returns what failed."""
        problems = []
        for ns in reversed(self.namespaces):
            r = _ip("netns", "del", ns, check=False)
            if r.returncode != 0:
                problems.append(f"netns del {ns}: {r.stderr.strip()}")
        self.namespaces.clear()
        if self._route:
            r = _ip("route", "del", "unreachable", str(self.net), check=False)
            if r.returncode != 0:
                problems.append(f"route del {self.net}: {r.stderr.strip()}")
            self._route = False
        return problems
