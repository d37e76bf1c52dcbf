"""Proxy settings: where to bind, which client keys to accept, how big a body may be."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from tiered_router.exceptions import PolicyError
from tiered_router.policy._schema import Policy

__all__ = ["API_KEYS_ENV", "ServerSettings", "is_loopback"]

API_KEYS_ENV = "TIERED_ROUTER_API_KEYS"
"""Environment variable with client API keys, comma-separated (added to ``server.api_keys``)."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (``127.0.0.0/8``, ``::1``, ``localhost``)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve anywhere


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSettings:
    """How the proxy serves.

    Example:
        ```python
        settings = ServerSettings.from_policy(policy, port=9000)
        app = create_app(policy, settings=settings)
        ```

    Attributes:
        host: Address to bind.
        port: Port to bind.
        api_keys: Keys clients must present as ``Authorization: Bearer <key>``; none means
            no authentication, which is only allowed on a loopback address.
        max_body_bytes: Largest request body accepted (larger gets 413).
        read_timeout_s: Seconds a client may take to send its headers, and again its body.
        max_tools: Most tools a request may carry.
        max_schema_bytes: Largest ``response_format`` or tool ``parameters`` schema.
        policy_file: The policy's file name, for error messages.

    """

    host: str = "127.0.0.1"
    port: int = 8000
    api_keys: tuple[str, ...] = field(default=(), repr=False)
    max_body_bytes: int = 4 * 1024 * 1024
    read_timeout_s: float = 10.0
    max_tools: int = 128
    max_schema_bytes: int = 256 * 1024
    policy_file: str = "<policy>"

    @classmethod
    def from_policy(
        cls,
        policy: Policy,
        *,
        env: Mapping[str, str] | None = None,
        policy_file: str = "<policy>",
        host: str | None = None,
        port: int | None = None,
        max_body_bytes: int | None = None,
    ) -> ServerSettings:
        """Read the policy's ``server`` section and ``TIERED_ROUTER_API_KEYS``; apply overrides.

        Args:
            policy: The policy.
            env: Where to read ``TIERED_ROUTER_API_KEYS``; ``os.environ`` when ``None``.
            policy_file: The policy's file name, for error messages.
            host: Overrides ``server.host``.
            port: Overrides ``server.port``.
            max_body_bytes: Overrides ``server.max_body_bytes``.

        """
        server = policy.server
        keys = [k.get_secret_value() for k in server.api_keys]
        extra = (os.environ if env is None else env).get(API_KEYS_ENV, "")
        keys.extend(k.strip() for k in extra.split(","))
        unique = tuple(dict.fromkeys(k for k in keys if k))
        return cls(
            host=server.host if host is None else host,
            port=server.port if port is None else port,
            api_keys=unique,
            max_body_bytes=server.max_body_bytes if max_body_bytes is None else max_body_bytes,
            read_timeout_s=server.read_timeout_s,
            max_tools=server.max_tools,
            max_schema_bytes=server.max_schema_bytes,
            policy_file=policy_file,
        )

    def with_overrides(self, **changes: object) -> ServerSettings:
        """Return a copy with some fields replaced."""
        return replace(self, **changes)  # type: ignore[arg-type]

    def check_bind(self) -> None:
        """Refuse to serve a non-loopback address without client keys.

        Raises:
            PolicyError: When ``host`` is not loopback and no API key is configured.

        """
        if not self.api_keys and not is_loopback(self.host):
            raise PolicyError(
                f"refusing to bind {self.host}: without client API keys the proxy serves "
                f"loopback only; set server.api_keys or {API_KEYS_ENV}",
                file=self.policy_file,
                field="server.api_keys",
            )
