"""The SSRF guard: event URLs must not reach into the deployment's own network."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from urllib.parse import urlsplit

from wagate.cache import TTLCache
from wagate.errors import InvalidUrl


def forbidden_address(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return (
        ip.is_loopback
        or ip.is_private
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_unspecified
        or ip.is_reserved
    )


async def check_url(
    url: str, *, allow_private: bool, field: str = "url", public_hosts: TTLCache[str, bool] | None = None
) -> str:
    """The URL, if it is http(s) and every address its host resolves to is public (422 `invalid_url`).

    Checked when a URL is given and again at delivery, since DNS answers can change. `public_hosts`
    remembers hosts found public for a while, so a send with a status_callback does not wait for DNS.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidUrl(
            "The URL must be an http or https URL with a host.",
            details=[{"field": field, "issue": "not an http(s) URL"}],
        )
    if allow_private:
        return url
    host = parts.hostname

    async def resolve() -> bool:
        await _require_public(host, parts.port or 443, field)
        return True

    if public_hosts is None:
        await resolve()
    else:
        await public_hosts.get_or_load(host, resolve)
    return url


async def _require_public(host: str, port: int, field: str) -> None:
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise InvalidUrl(
            f"The host {host} does not resolve.",
            details=[{"field": field, "issue": "host does not resolve"}],
        ) from exc
    addresses = {str(info[4][0]) for info in infos}
    if not addresses or any(forbidden_address(a) for a in addresses):
        raise InvalidUrl(
            f"The host {host} resolves to a loopback, private, link-local or multicast address.",
            details=[{"field": field, "issue": "resolves to a non-public address"}],
        )
