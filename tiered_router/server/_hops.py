"""The proxy never calls itself, and never fights another server for a port.

A policy whose backend points at the proxy's own address (a local-server preset on the
proxy's port, a typo in ``base_url``) would make each request call the proxy again, which
calls itself again, until the deadline: one client request fanning out into a hundred. So:

- every upstream request the proxy sends carries ``x-tiered-router-hop: <id>``, the id of
  this proxy (one per ``serve``, shared by its workers; :func:`with_hop`);
- a request that came through other proxies forwards their ids too, comma-separated, with
  this proxy's last (:func:`forward_chain`), so a loop through several proxies
  (A -> B -> A) is seen by the first proxy it comes back to;
- a request that arrives carrying the proxy's own id is refused at once with 508
  ``loop_detected`` in OpenAI's error shape, and so is one whose chain, with this proxy's
  id added, would name more than ``MAX_HOPS`` proxies: the first proxy that would forward
  a chain too long refuses it, before any upstream call (:func:`read_chain`);
- a hop header that is not a chain of proxy ids (an empty part, a part over 64 characters
  or with other characters than letters, digits, ``_``, ``.`` and ``-``) was not written
  by a proxy: it is refused with 400 ``invalid_hop_header``, never forwarded;
- the calling side of a 508 sees a backend error that is neither retried nor counted by
  that backend's breaker (a loop is the route's fault, not the backend's health, and a
  client's forged chain must not open another proxy's breaker); the other tier answers;
- ``serve`` and ``validate`` warn when a backend's URL is the proxy's own address
  (:func:`calls_itself`).

The proxy's default port (8100) is not a local model server's (vLLM and dlmserve: 8000,
SGLang: 30000), and ``serve`` on a port that is taken stops with one line
(:func:`check_port_free`, :class:`PortInUse`) instead of uvicorn's traceback.
"""

from __future__ import annotations

import errno
import os
import re
import socket
from collections.abc import Sequence
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from tiered_router.policy import Policy

__all__ = [
    "HOP_HEADER",
    "MAX_HOPS",
    "HopRefused",
    "PortInUse",
    "calls_itself",
    "check_port_free",
    "forward_chain",
    "new_hop_id",
    "read_chain",
    "with_hop",
]

HOP_HEADER = "x-tiered-router-hop"
"""The header naming the proxies a request came through, oldest first."""
MAX_HOPS = 8
"""Most proxies a chain may name, this proxy included; a longer one is refused as a loop."""

_ANY_ADDRESS = frozenset({"0.0.0.0", "::", ""})
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


def new_hop_id() -> str:
    """A fresh proxy id (random; it names no host and holds no secret)."""
    return os.urandom(8).hex()


def with_hop(policy: Policy, hop_id: str) -> Policy:
    """``policy`` with the hop header added to every HTTP backend's headers."""
    backends = {
        name: config.model_copy(update={"headers": {**config.headers, HOP_HEADER: hop_id}})
        if config.type == "openai"
        else config
        for name, config in policy.backends.items()
    }
    return policy.model_copy(update={"backends": backends})


_HOP_ID = re.compile(r"[0-9A-Za-z_.-]{1,64}")


class HopRefused(Exception):
    """A request's hop chain is refused: a loop, too long, or not written by a proxy.

    Attributes:
        status: 508 (``loop_detected``) or 400 (``invalid_hop_header``).
        code: OpenAI-style error code.
    """

    def __init__(self, message: str, *, status: int, code: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def read_chain(values: Sequence[str], hop_id: str) -> list[str]:
    """The proxy ids a request came through, oldest first, from its hop header(s).

    Args:
        values: Every ``x-tiered-router-hop`` header the request carries (a client may send
            several; they are read as one comma-separated chain).
        hop_id: This proxy's id.

    Returns:
        The ids (empty for a request straight from a client).

    Raises:
        HopRefused: A part that is no proxy id (400), the chain holds ``hop_id`` (508: the
            request came back), or the chain with ``hop_id`` added would name more than
            :data:`MAX_HOPS` proxies (508: forwarding it could only be refused further on).

    """
    values = [value for value in values if value.strip()]  # an empty header names no proxy
    if not values:
        return []
    hops = [part.strip() for value in values for part in value.split(",")]
    bad = next((h for h in hops if not _HOP_ID.fullmatch(h)), None)
    if bad is not None:
        raise HopRefused(
            f"{HOP_HEADER}: {_shown(bad)} is not a proxy id (1-64 letters, digits, '_', '.' "
            "or '-', comma-separated): this header is written by tiered-router proxies only",
            status=400,
            code="invalid_hop_header",
        )
    if hop_id in hops:
        if hops[-1] == hop_id:
            message = (
                "this request came from this proxy itself: a backend's base_url is the "
                "proxy's own address (change that backend's base_url or the proxy's port)"
            )
        else:
            message = (
                f"this request left this proxy and came back through {len(hops) - 1} "
                "other tiered-router proxies: their backends point at one another "
                "(change one backend's base_url)"
            )
        raise HopRefused(message, status=508, code="loop_detected")
    if len(hops) + 1 > MAX_HOPS:
        raise HopRefused(
            f"this request came through {len(hops)} tiered-router proxies; with this one "
            f"that is more than {MAX_HOPS}: their backends point at one another",
            status=508,
            code="loop_detected",
        )
    return hops


def _shown(part: str) -> str:
    return repr(part) if len(part) <= 40 else f"a part of {len(part)} characters"


def forward_chain(hops: list[str], hop_id: str) -> str | None:
    """The hop header to send upstream for a request that came through ``hops``.

    ``hops`` is what :func:`read_chain` read from the request. ``None`` when the request came
    straight from a client: the backend's own header (:func:`with_hop`, this proxy's id
    alone) is right then.
    """
    if not hops:
        return None
    return ", ".join([*hops, hop_id])


def _same_host(bound: str, target: str) -> bool:
    bound, target = bound.strip("[]").lower(), target.strip("[]").lower()
    if bound == target:
        return True
    if bound in _ANY_ADDRESS:  # bound on every address: any local name reaches it
        return target in _LOOPBACK or target in _ANY_ADDRESS
    return bound in _LOOPBACK and target in _LOOPBACK


def calls_itself(policy: Policy, *, host: str, port: int) -> list[str]:
    """The tiers' backends whose URL (presets applied) is the proxy's own ``host:port``.

    Names only ``host:port`` pairs that surely meet: the same address, or loopback names
    for a proxy bound to loopback or to every address.
    """
    from tiered_router.backends.presets import resolve_config

    found: list[str] = []
    for name, config in policy.backends.items():
        if config.type != "openai":
            continue
        try:
            url = resolve_config(config, backend=name, prices=policy.prices).base_url
        except (ValueError, LookupError):
            continue  # the loader reports a broken backend itself
        if not url:
            continue
        parts = urlsplit(url)
        default = 443 if parts.scheme == "https" else 80
        try:
            target_port = parts.port or default
        except ValueError:
            continue
        if target_port == port and _same_host(host, parts.hostname or ""):
            found.append(name)
    return found


class PortInUse(OSError):
    """The proxy's port is taken by another process.

    Attributes:
        host: The address asked for.
        port: The port asked for.
    """

    def __init__(self, host: str, port: int) -> None:
        super().__init__(
            f"cannot serve on {host}:{port}: the port is in use (another server, or a model "
            "server such as vLLM or dlmserve); stop it or pass --port"
        )
        self.errno = errno.EADDRINUSE
        self.host = host
        self.port = port


def check_port_free(host: str, port: int) -> None:
    """Raise :class:`PortInUse` when ``host:port`` cannot be bound because it is taken.

    Binds and closes a socket as uvicorn will (``SO_REUSEADDR``), so a port left in
    ``TIME_WAIT`` by a server that just stopped counts as free. Port 0 is always free.
    """
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host.strip("[]"), port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUse(host, port) from None
            raise
