"""Two "hosts" on one machine: two network namespaces joined by two veth pairs.

The data pair carries the ranks' gloo connections (GLOO_SOCKET_IFNAME names its end in
each namespace); the control pair carries torchrun's rendezvous and ddpdoctor's nodes'
store, as a cluster's management network does.  ``cut()`` adds a blackhole route in host
A to host B's data address: every packet A sends B on the data network is dropped (this
kernel has no netem), while the control network goes on.  Every address lives inside the
two namespaces only; ``remove()`` kills what still runs in them and deletes them (their
veth ends go with them).  Needs root and iproute2."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field

NET = "10.231"  # 10.231.0.0/24: data, 10.231.1.0/24: control (inside the namespaces)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30,
                          check=check)


def unavailable() -> str | None:
    """Why two namespaces cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return "needs root (ip netns add)"
    if shutil.which("ip") is None:
        return "needs iproute2's ip"
    return None


@dataclass
class TwoHosts:
    """Hosts A (node 0) and B (node 1); ``tag`` keeps the names apart from other runs'."""

    tag: str = field(default_factory=lambda: secrets.token_hex(3))
    made: list[str] = field(default_factory=list)  # namespaces created
    links: list[str] = field(default_factory=list)  # veth ends created in this namespace

    @property
    def ns(self) -> tuple[str, str]:
        return f"ddpd-{self.tag}-a", f"ddpd-{self.tag}-b"

    def data_if(self, host: int) -> str:
        return f"dd{self.tag}{'ab'[host]}"

    def ctl_if(self, host: int) -> str:
        return f"dc{self.tag}{'ab'[host]}"

    def data_ip(self, host: int) -> str:
        return f"{NET}.0.{host + 1}"

    def ctl_ip(self, host: int) -> str:
        return f"{NET}.1.{host + 1}"

    def create(self) -> None:
        """Make both namespaces and both veth pairs, addressed and up."""
        for ns in self.ns:
            _ip("netns", "add", ns)
            self.made.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        for name, ip, net in ((self.data_if, self.data_ip, 0), (self.ctl_if, self.ctl_ip, 1)):
            _ip("link", "add", name(0), "type", "veth", "peer", "name", name(1))
            self.links.append(name(0))
            for host in (0, 1):
                _ip("link", "set", name(host), "netns", self.ns[host])
                _ip("-n", self.ns[host], "addr", "add", f"{ip(host)}/24", "dev", name(host))
                _ip("-n", self.ns[host], "link", "set", name(host), "up")
            self.links.remove(name(0))  # inside the namespaces now: they go with them

    def cut(self) -> None:
        """Host A drops every packet it sends to host B's data address."""
        _ip("-n", self.ns[0], "route", "add", "blackhole", f"{self.data_ip(1)}/32")

    def run_in(self, host: int) -> list[str]:
        """The command prefix that runs a program in host ``host``'s namespace."""
        return ["ip", "netns", "exec", self.ns[host]]

    def pids(self) -> list[int]:
        """The processes running in either namespace now."""
        found = []
        for ns in self.made:
            out = _ip("netns", "pids", ns, check=False).stdout
            found += [int(p) for p in out.split() if p.isdigit()]
        return found

    def remove(self) -> None:
        """Kill what runs in the namespaces (our job's processes), delete them, and any
        veth end still outside them; say what could not be removed."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = self.pids()
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 5
            while self.pids() and time.monotonic() < deadline:
                time.sleep(0.1)
        problems = []
        for ns in list(self.made):
            done = _ip("netns", "del", ns, check=False)
            if done.returncode == 0:
                self.made.remove(ns)
            else:
                problems.append(f"{ns}: {done.stderr.strip()}")
        for name in list(self.links):
            if _ip("link", "del", name, check=False).returncode == 0:
                self.links.remove(name)
        leftover = [n for n in _ip("-o", "link", "show").stdout.split()
                    if self.tag in n]
        if problems or leftover:
            raise RuntimeError(f"could not remove {problems or leftover}")
