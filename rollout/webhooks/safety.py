"""Which webhook URLs and addresses may be called (docs/webhooks.md), without Django.

Two checks guard against server-side request forgery:

* ``check_url`` when a webhook is subscribed: the URL's shape, and its address when the host is an
  IP literal. It does no DNS: a name may legitimately resolve later, or differently.
* ``resolve_checked`` at every delivery: the name is resolved once, every address it gives must pass
  ``address_allowed``, and the caller then dials one of those very addresses (see
  ``transport.post_pinned``), so a DNS answer that changes between the check and the connection
  (rebinding) cannot redirect the request.

``allow_private`` is the delivery-time face of ``ROLLOUT_WEBHOOKS_ALLOW_HTTP=1``: tests and the demo
call receivers on http://127.0.0.1. Link-local and cloud metadata addresses are refused even then.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

import idna

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

MAX_URL_LENGTH = 2000

_net = ipaddress.ip_network

# Never called, whatever the flag says.
_NEVER = (
    _net("0.0.0.0/8"),  # "this network": Linux routes 0.0.0.0 to the local host
    _net("169.254.0.0/16"),  # link-local, holds 169.254.169.254 (AWS, GCP, Azure, OpenStack metadata)
    _net("224.0.0.0/4"),  # multicast
    _net("240.0.0.0/4"),  # reserved, holds the broadcast 255.255.255.255
    _net("100.100.100.200/32"),  # Alibaba Cloud metadata (inside CGNAT space, so listed before it)
    _net("168.63.129.16/32"),  # Azure wire server: a public address that only answers inside Azure
    _net("::/128"),  # unspecified
    _net("fe80::/10"),  # link-local
    _net("fec0::/10"),  # deprecated site-local, still link-scoped in practice
    _net("ff00::/8"),  # multicast
    _net("fd00:ec2::254/128"),  # AWS metadata over IPv6 (inside fc00::/7, so listed before it)
)

# Called only with allow_private: loopback, RFC 1918, CGNAT, unique local.
_PRIVATE = (
    _net("127.0.0.0/8"),
    _net("10.0.0.0/8"),
    _net("172.16.0.0/12"),
    _net("192.168.0.0/16"),
    _net("100.64.0.0/10"),
    _net("::1/128"),
    _net("fc00::/7"),
)

# IPv6 prefixes that carry an IPv4 address the packet ends up at.
_NAT64 = _net("64:ff9b::/96")

_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")
# WHATWG URL parsers read a host whose last label is a number as IPv4 ("127.1", "0x7f.1").
_NUMERIC_LABEL = re.compile(r"0x[0-9a-f]*|[0-9]+")
_FORBIDDEN_CHARS = re.compile(r"[\x00-\x20\x7f\\]")


class UnsafeURL(ValueError):
    """A webhook URL or address that must not be called; the message is one sentence for the client."""

    code = "invalid_url"


@dataclass(frozen=True)
class Target:
    """A checked URL taken apart: ``host`` is ASCII (IDNA) without brackets, ready to resolve and dial."""

    scheme: str
    host: str
    port: int
    target: str  # path and query, as sent on the request line
    ip: IPAddress | None  # set when the host is an IP literal

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one stands for (mapped, NAT64, 6to4), judged in its place."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip.sixtofour


def address_allowed(ip: IPAddress, *, allow_private: bool) -> bool:
    """May a webhook delivery connect to ``ip``? Private and loopback only with ``allow_private``."""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(ip)
        if embedded is not None:
            return address_allowed(embedded, allow_private=allow_private)
    if any(ip in net for net in _NEVER):
        return False
    if any(ip in net for net in _PRIVATE):
        return allow_private
    # Whatever else is not globally routable (documentation, benchmarking, protocol assignments,
    # Teredo...) has no business receiving webhooks either.
    return ip.is_global and not (ip.is_multicast or ip.is_reserved or ip.is_unspecified or ip.is_link_local)


def _ip_literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _ascii_host(host: str) -> str:
    """The host as ASCII: IDNA (UTS 46) for international names, validated label by label."""
    if not host.isascii():
        try:
            host = idna.encode(host, uts46=True).decode("ascii")
        except (idna.IDNAError, UnicodeError, ValueError) as exc:
            raise UnsafeURL("The URL's host is not a valid internationalised domain name.") from exc
    if _ip_literal(host) is not None:  # e.g. full-width digits that UTS 46 maps to an IPv4 address
        return host
    name = host[:-1] if host.endswith(".") else host
    labels = name.split(".")
    if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise UnsafeURL("The URL's host is not a valid host name.")
    if _NUMERIC_LABEL.fullmatch(labels[-1]):
        raise UnsafeURL("The URL's host looks like an IP address but is not written as one.")
    return host


def parse_url(url: str, *, allow_http: bool) -> Target:
    """Check a webhook URL's shape (no DNS) and take it apart; raise UnsafeURL saying what is wrong."""
    if not isinstance(url, str):
        raise UnsafeURL("The URL must be a string.")
    if len(url) > MAX_URL_LENGTH:
        raise UnsafeURL(f"The URL is longer than {MAX_URL_LENGTH} characters.")
    try:
        url.encode("utf-8")
    except UnicodeError as exc:  # lone surrogates
        raise UnsafeURL("The URL is not valid text.") from exc
    if _FORBIDDEN_CHARS.search(url):
        # Parsers disagree on spaces, control characters and backslashes: refuse them all.
        raise UnsafeURL("The URL contains spaces, control characters or backslashes.")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UnsafeURL("The URL cannot be parsed.") from exc

    schemes = ("https", "http") if allow_http else ("https",)
    if parts.scheme not in schemes:
        raise UnsafeURL("The URL must start with https://." if not allow_http else "The URL must be http(s)://.")
    if "#" in url:
        raise UnsafeURL("The URL must not have a fragment (#...).")
    if "@" in parts.netloc:
        raise UnsafeURL("The URL must not carry a user name or password.")
    if not parts.hostname:
        raise UnsafeURL("The URL has no host.")
    if port == 0:
        raise UnsafeURL("The URL's port must be between 1 and 65535.")
    rest = parts.path + parts.query
    if not rest.isascii():
        raise UnsafeURL("The URL's path and query must be ASCII (percent-encode other characters).")

    if "%" in parts.hostname and ":" in parts.hostname:
        raise UnsafeURL("The URL must not carry an IPv6 zone identifier.")
    if ":" in parts.hostname and _ip_literal(parts.hostname) is None:
        raise UnsafeURL("The URL's host is not a valid IPv6 address.")
    host = _ascii_host(parts.hostname)
    ip = _ip_literal(host)
    if ip is not None and not address_allowed(ip, allow_private=allow_http):
        raise UnsafeURL("The URL points at an address that webhooks may not call.")
    if ip is None and not allow_http and (host.rstrip(".") == "localhost" or host.rstrip(".").endswith(".localhost")):
        raise UnsafeURL("The URL points at an address that webhooks may not call.")

    default = 443 if parts.scheme == "https" else 80
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(scheme=parts.scheme, host=host, port=port or default, target=target, ip=ip)


def check_url(url: str, *, allow_http: bool) -> None:
    """Subscription-time check of a webhook URL (shape, and the address of an IP literal); raises UnsafeURL."""
    parse_url(url, allow_http=allow_http)


def addresses_checked(addresses: list[IPAddress], *, allow_private: bool) -> list[IPAddress]:
    """The addresses, deduplicated in order, when every one may be called; else UnsafeURL.

    One bad address refuses them all: a name that resolves to a public and a private address is
    exactly what a rebinding attacker serves, and the client may pick either.
    """
    unique = list(dict.fromkeys(addresses))
    if not unique:
        raise UnsafeURL("The URL's host does not resolve to any address.")
    if not all(address_allowed(ip, allow_private=allow_private) for ip in unique):
        raise UnsafeURL("The URL's host resolves to an address that webhooks may not call.")
    return unique


def resolve_checked(host: str, port: int, *, allow_private: bool) -> list[IPAddress]:
    """Resolve ``host`` (name or IP literal) for a delivery; the addresses to dial, or UnsafeURL.

    The name is IDNA-encoded first. DNS time is bounded by the system resolver's own timeouts
    (resolv.conf), not by the delivery timeout.
    """
    try:
        ascii_host = host if _ip_literal(host) is not None else _ascii_host(host)
        infos = socket.getaddrinfo(ascii_host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except UnsafeURL:
        raise
    except (OSError, UnicodeError, ValueError) as exc:
        raise UnsafeURL("The URL's host does not resolve to any address.") from exc
    addresses: list[IPAddress] = []
    for family, *_, sockaddr in infos:
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        ip = _ip_literal(str(sockaddr[0]))
        if ip is None:
            raise UnsafeURL("The URL's host resolves to an address that webhooks may not call.")
        addresses.append(ip)
    return addresses_checked(addresses, allow_private=allow_private)
