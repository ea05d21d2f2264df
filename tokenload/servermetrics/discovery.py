"""Which replicas to scrape, found again during the run (``--metrics-discover``).

Two sources, both re-read every ``--metrics-discover-every`` seconds by the scraper:

* ``HOST:PORT[/PATH]``: a headless Service's name (Kubernetes resolves it to the addresses of its
  ready pods), one ``http://IP:PORT/PATH`` per address, so each replica is scraped on its own
  instead of a different one behind a load-balanced name at every scrape;
* ``file:PATH``: a file of ``/metrics`` URLs, one per line (``#`` starts a comment), which a
  script, a sidecar or a mounted ConfigMap keeps current (Prometheus's file-based discovery has
  the same shape).

A lookup that fails (the name does not resolve, the file is missing or malformed) changes
nothing: the scraper keeps its targets and says so once. Standard library only; no Locust.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

__all__ = ["DiscoverySpec", "Resolver", "is_metrics_url", "parse_spec", "urls_of_addresses"]

#: ``socket.getaddrinfo``'s signature (gevent's cooperative one under Locust).
Resolver = Callable[..., Sequence[Any]]

_FORM = "HOST:PORT[/PATH] (a headless Service) or file:PATH (a file of /metrics URLs)"


@dataclass(frozen=True, slots=True)
class DiscoverySpec:
    """A parsed ``--metrics-discover`` value."""

    text: str
    host: str = ""
    port: int = 0
    path: str = "/metrics"
    file: Path | None = None

    def find(self, resolve: Resolver = socket.getaddrinfo) -> list[str]:
        """The replicas' /metrics URLs now, sorted. Raises OSError or ValueError when the lookup
        fails (the caller keeps what it had)."""
        if self.file is not None:
            return read_url_file(self.file)
        infos = resolve(self.host, self.port, type=socket.SOCK_STREAM)
        return urls_of_addresses({info[4][0] for info in infos}, self.port, self.path)


def parse_spec(text: str) -> DiscoverySpec:
    """``--metrics-discover``'s value. Raises ValueError naming the expected form."""
    text = text.strip()
    if text.startswith("file:"):
        name = text.removeprefix("file:")
        if not name:
            raise ValueError(f"--metrics-discover: expected {_FORM}, got {text!r}")
        return DiscoverySpec(text=text, file=Path(name))
    hostport, slash, path = text.partition("/")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536 or "//" in text:
        raise ValueError(f"--metrics-discover: expected {_FORM}, got {text!r}")
    return DiscoverySpec(
        text=text, host=host.strip("[]"), port=int(port), path="/" + path if slash else "/metrics"
    )


def urls_of_addresses(addresses: set[str] | Sequence[str], port: int, path: str) -> list[str]:
    """One ``http://ADDRESS:PORT/PATH`` per address (IPv6 in brackets), sorted, no repeats."""
    return sorted(
        {f"http://[{a}]:{port}{path}" if ":" in a else f"http://{a}:{port}{path}" for a in addresses}
    )


def is_metrics_url(url: str) -> bool:
    """An http(s) URL with a host: what --metrics-url, a discovery file and the scraper accept."""
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def read_url_file(path: Path) -> list[str]:
    """The URLs in a discovery file, one per line, ``#`` comments and blank lines skipped.
    Raises OSError when unreadable and ValueError naming the line of a URL that is not http(s)."""
    urls: set[str] = set()
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        url = line.split("#", 1)[0].strip()
        if not url:
            continue
        if not is_metrics_url(url):
            raise ValueError(f"{path}:{number}: expected an http(s) URL, got {url!r}")
        urls.add(url)
    return sorted(urls)
