"""The SSRF guard: event URLs must not reach into the deployment's own network."""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from urllib.parse import urlsplit

from wagate.core.cache import Part, TTLCache
from wagate.core.errors import InvalidUrl
from wagate.http.limits import CONTROL_CHARACTER

# IPv6 prefixes that carry an IPv4 address a gateway or relay forwards to: judged by that address.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_LOCAL_NAT64 = ipaddress.IPv6Network("64:ff9b:1::/48")  # RFC 8215: the operator's own translator
_HOST_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")


def forbidden_address(address: str) -> bool:
    """Whether an event may not be posted to this address: anything not globally routable.

    `is_global` leaves out private and loopback ranges and also the shared address space
    100.64.0.0/10 (carrier-grade NAT, where some clouds put their metadata endpoints), benchmarking,
    documentation and reserved ranges; multicast counts as global, so it is refused on its own, and
    so do (in this Python's tables) unallocated and deprecated site-local IPv6 ranges.
    """
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in _LOCAL_NAT64:
            return True
        nat64 = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF) if ip in _NAT64 else None
        embedded = ip.ipv4_mapped or ip.sixtofour or nat64
        if embedded is None:
            return not ip.is_global or ip.is_multicast or ip.is_reserved or ip.is_site_local
        ip = embedded
    return not ip.is_global or ip.is_multicast


def checked_syntax(url: str, field: str = "url") -> tuple[str, int]:
    """(host, port) of an http(s) URL that can be connected to, or 422 `invalid_url`.

    Checked whatever WAGATE_ALLOW_PRIVATE_URLS says: a URL that cannot be parsed or connected to (a
    port out of range, a host label over 63 characters, a space or control character) is invalid
    everywhere, and would otherwise fail later, at every delivery.
    """

    def invalid(issue: str) -> InvalidUrl:
        return InvalidUrl(f"The URL is not valid: {issue}.", details=[{"field": field, "issue": issue}])

    if CONTROL_CHARACTER.search(url) or any(c.isspace() for c in url):
        raise invalid("it contains a space or a control character")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # an unbalanced [ ], a port that is not a number or beyond 65535
        raise invalid("the host is malformed or the port is not a number from 1 to 65535") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidUrl(
            "The URL must be an http or https URL with a host.",
            details=[{"field": field, "issue": "not an http(s) URL"}],
        )
    if port == 0:
        raise invalid("port 0 cannot be connected to")
    host = parts.hostname
    if not _valid_host(host):
        raise invalid("the host is not a valid host name (labels of 1 to 63 letters, digits or hyphens)")
    return host, port or (443 if parts.scheme == "https" else 80)


def _valid_host(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    try:
        ascii_host = host.encode("idna").decode("ascii")  # also refuses empty and over-long labels
    except UnicodeError:
        return False
    labels = ascii_host.removesuffix(".").split(".")
    return len(ascii_host) <= 253 and all(_HOST_LABEL.fullmatch(label) for label in labels)


# Hosts of status_callback URLs found to be public (the SSRF guard), for a minute.
PUBLIC_HOSTS: Part[TTLCache[str, bool]] = Part("public hosts", lambda: TTLCache(ttl=60.0))


async def check_url(
    url: str, *, allow_private: bool, field: str = "url", public_hosts: TTLCache[str, bool] | None = None
) -> str:
    """The URL, if it is a valid http(s) URL and every address its host resolves to is public (422
    `invalid_url` otherwise; only the second check is lifted by WAGATE_ALLOW_PRIVATE_URLS).

    Checked when a URL is given and again at delivery, since DNS answers can change. `public_hosts`
    remembers hosts found public for a while, so a send with a status_callback does not wait for DNS.
    """
    host, port = checked_syntax(url, field)
    if allow_private:
        return url

    async def resolve() -> bool:
        await _require_public(host, port, field)
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
            f"The host {host} resolves to an address that is not public (loopback, private, shared, "
            "link-local, multicast or reserved).",
            details=[{"field": field, "issue": "resolves to a non-public address"}],
        )
