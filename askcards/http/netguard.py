"""Where a webhook may point and how it is reached (SSRF guard, SPEC §8).

A webhook URL is chosen by whoever configures an agent, and the worker POSTs to it from inside our
network: without a guard it reads cloud metadata (169.254.169.254, 100.100.100.200) or pokes
internal services. The policy:

- http and https only; no credentials in the URL;
- link-local, cloud-metadata, unspecified, multicast and reserved addresses are always refused;
- loopback and private ranges (127/8, ::1, 10/8, 172.16/12, 192.168/16, fc00::/7, 100.64/10 and
  whatever else is not globally routable) only when ``ASKCARDS_WEBHOOK_ALLOW_PRIVATE=true``;
- checked when the URL is saved (a literal address; a hostname is only checked for form) and again
  at every delivery on the addresses the hostname resolves to then, refusing if ANY is disallowed;
  the POST then connects to a checked address, never resolving the name a second time (a DNS
  rebinding answer between check and connect cannot redirect it). Host header, TLS SNI and the
  certificate check still use the hostname.

This module only knows addresses and URLs; it imports nothing of askcards but its errors.
"""
from __future__ import annotations

import ipaddress
import os
import re
import socket
from typing import Any
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter

from askcards.errors import InvalidInput

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

URL_MAX_LENGTH = 500  # Agent.webhook_url's max_length
PRIVATE_SETTING = "ASKCARDS_WEBHOOK_ALLOW_PRIVATE"
# A hostile DNS answer may list many addresses; a connect failure moves on to the next few only,
# so one delivery stays within a few connect timeouts.
MAX_ADDRESSES_TRIED = 2

_net = ipaddress.ip_network
METADATA = (
    _net("169.254.0.0/16"),  # IPv4 link-local: AWS, GCP, Azure, OpenStack, Tencent metadata
    _net("fe80::/10"),  # IPv6 link-local
    _net("fd00:ec2::254/128"),  # AWS metadata over IPv6
    _net("100.100.100.200/32"),  # Alibaba Cloud metadata (inside CGNAT 100.64/10)
    _net("192.0.0.192/32"),  # Oracle Cloud metadata (inside 192.0.0.0/24)
)
NEVER = (
    _net("0.0.0.0/8"),  # "this network": 0.0.0.0 reaches the local host
    _net("::/128"),
    _net("224.0.0.0/4"),  # multicast
    _net("ff00::/8"),
    _net("240.0.0.0/4"),  # reserved, and the broadcast address
    _net("::/96"),  # deprecated IPv4-compatible IPv6
)
PRIVATE = (
    _net("127.0.0.0/8"),
    _net("::1/128"),
    _net("10.0.0.0/8"),
    _net("172.16.0.0/12"),
    _net("192.168.0.0/16"),
    _net("fc00::/7"),
    _net("100.64.0.0/10"),  # carrier-grade NAT, also used inside clouds
)
LOOPBACK6 = ipaddress.ip_address("::1")  # inside ::/96 and ::/8 (reserved), yet plain loopback
# IPv6 forms that carry an IPv4 address a gateway will reach: NAT64 (well-known and local-use
# prefixes). IPv4-mapped, 6to4 and Teredo are unwrapped through ipaddress's own properties.
NAT64 = (_net("64:ff9b::/96"), _net("64:ff9b:1::/48"))


def refusal(address: IPAddress, *, allow_private: bool) -> str | None:
    """Why a webhook may not connect to ``address`` (a phrase for an error message), or None."""
    if isinstance(address, ipaddress.IPv6Address):
        # An IPv4-mapped or NAT64 address reaches its IPv4 address: judged as that address.
        translated = address.ipv4_mapped or _nat64(address)
        if translated is not None:
            reason = refusal(translated, allow_private=allow_private)
            return f"{reason} (as {address})" if reason else None
        # 6to4 and Teredo carry an IPv4 address a relay will reach.
        for embedded in (address.sixtofour, address.teredo[1] if address.teredo else None):
            reason = refusal(embedded, allow_private=allow_private) if embedded else None
            if reason:
                return f"{reason} (embedded in {address})"
    if any(address in network for network in METADATA):
        return "a link-local or cloud metadata address, always refused"
    if address != LOOPBACK6 and (
        any(address in network for network in NEVER) or address.is_multicast or address.is_reserved
    ):
        return "an unspecified, multicast or reserved address, always refused"
    if allow_private:
        return None
    if any(address in network for network in PRIVATE) or not address.is_global:
        return f"a loopback or private address, refused unless {PRIVATE_SETTING}=true"
    return None


def _nat64(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if any(address in network for network in NAT64):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


_LABEL = r"(?!-)[a-z0-9_-]{1,63}(?<!-)"
_HOSTNAME = re.compile(rf"^{_LABEL}(\.{_LABEL})*\.?$")


def check_url(url: str, *, allow_private: bool) -> str:
    """The webhook URL to store ("" for none), or InvalidInput saying what is wrong with it.

    A literal address (including the legacy IPv4 spellings a resolver accepts, like 2130706433)
    is checked against the policy here; a hostname is checked when a delivery resolves it.
    """
    url = url.strip()
    if not url:
        return ""
    if len(url) > URL_MAX_LENGTH:
        raise InvalidInput(f"webhook URL is {len(url)} characters long; at most {URL_MAX_LENGTH} are allowed")
    if any(ord(char) <= 0x20 or ord(char) == 0x7F for char in url):
        raise InvalidInput("webhook URL must not contain spaces or control characters")
    expected = "expected http://host[:port]/path or https://host[:port]/path"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in 0..65535
    except ValueError:
        raise InvalidInput(
            f"webhook URL is not a valid URL (its port or [address] does not parse); {expected}"
        ) from None
    if parts.scheme and parts.scheme.lower() not in ("http", "https"):
        raise InvalidInput(f"webhook URL must use http or https, not {parts.scheme!r}")
    if not parts.scheme or not parts.netloc:
        raise InvalidInput(f"webhook URL is not a URL; {expected}")
    if parts.username is not None or parts.password is not None:
        raise InvalidInput("webhook URL must not contain a user name or password; webhooks are signed instead")
    host = parts.hostname or ""
    address = literal_address(host)
    if address is None:
        if not _is_hostname(host):
            raise InvalidInput(f"webhook URL has no valid host name ({host!r}); {expected}")
        if host.rstrip(".") == "localhost" or host.rstrip(".").endswith(".localhost"):
            address = ipaddress.ip_address("127.0.0.1")
    if address is not None:
        reason = refusal(address, allow_private=allow_private)
        if reason:
            raise InvalidInput(f"webhook URL points to {host}, {reason}")
    return url


def literal_address(host: str) -> IPAddress | None:
    """The address ``host`` spells, if it is one: standard forms and the legacy IPv4 forms
    (``127.1``, ``0x7f.0.0.1``, ``2130706433``) that resolvers turn into an address."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if re.fullmatch(r"[0-9a-fA-FxX.]+", host) and any(char.isdigit() for char in host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def _is_hostname(host: str) -> bool:
    try:
        ascii_host = host.encode("idna").decode("ascii")
    except UnicodeError:
        return False
    return bool(_HOSTNAME.match(ascii_host)) and len(ascii_host) <= 253


class Refused(Exception):
    """A delivery was not attempted: the URL or an address it resolves to is not allowed. The
    message names the host and the reason, never the path or query."""


def resolve(url: str, *, allow_private: bool) -> list[str]:
    """The addresses to connect to for ``url``, in resolver order; Refused if the URL fails the
    policy, the name does not resolve, or ANY resolved address is disallowed."""
    try:
        check_url(url, allow_private=allow_private)
    except InvalidInput as exc:
        raise Refused(exc.message) from None
    parts = urlsplit(url.strip())
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as exc:
        raise Refused(f"could not resolve {host}: {type(exc).__name__}") from None
    addresses: list[str] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        text = str(sockaddr[0])
        address = ipaddress.ip_address(text.split("%", 1)[0])
        reason = refusal(address, allow_private=allow_private)
        if reason:
            raise Refused(f"{host} resolves to {address}, {reason}")
        if text not in addresses:
            addresses.append(text)
    if not addresses:
        raise Refused(f"could not resolve {host}: no address")
    return addresses


class PinnedAdapter(HTTPAdapter):
    """Connects to one given address whatever the URL's host; the URL's host still names the
    server in the Host header, the TLS SNI and the certificate check."""

    def __init__(self, address: str):
        self.address = address
        super().__init__(pool_connections=1, pool_maxsize=1, max_retries=0)

    def get_connection_with_tls_context(
        self, request: requests.PreparedRequest, verify: Any, proxies: Any = None, cert: Any = None
    ) -> Any:
        host_params, key_kwargs = self.build_connection_pool_key_attributes(request, verify, cert)
        # Any urllib3 pool argument goes; requests' stubs type only the ones it sets itself.
        pool_kwargs: dict[str, Any] = dict(key_kwargs)
        if host_params["scheme"] == "https":
            pool_kwargs["server_hostname"] = host_params["host"]
            pool_kwargs["assert_hostname"] = host_params["host"]
        return self.poolmanager.connection_from_host(
            host=self.address, port=host_params["port"], scheme=host_params["scheme"], pool_kwargs=pool_kwargs
        )

    def add_headers(self, request: requests.PreparedRequest, **kwargs: Any) -> None:
        # The connection's host is the address; the request names the server (IDNA-encoded, as
        # requests prepared the URL).
        request.headers["Host"] = urlsplit(request.url or "").netloc


def post(
    url: str,
    *,
    body: bytes,
    headers: dict[str, str],
    allow_private: bool,
    connect_timeout: float,
    read_timeout: float,
    verify: bool | str = True,
) -> int:
    """POST ``body`` to a webhook URL and return the response's status code. Redirects are never
    followed (a 3xx is returned as is) and the response body is never read.

    Raises Refused (nothing was sent) or a ``requests.RequestException``. Proxy variables from the
    environment are ignored: the address checked is the address connected to. A CA bundle named by
    REQUESTS_CA_BUNDLE or CURL_CA_BUNDLE is used, as requests would.
    """
    addresses = resolve(url, allow_private=allow_private)
    if verify is True:
        # What requests itself would take from the environment (trust_env is off for proxies).
        verify = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or True
    for index, address in enumerate(addresses[:MAX_ADDRESSES_TRIED]):
        with requests.Session() as session:
            session.trust_env = False
            session.mount("http://", PinnedAdapter(address))
            session.mount("https://", PinnedAdapter(address))
            try:
                response = session.post(
                    url.strip(),
                    data=body,
                    headers=headers,
                    timeout=(connect_timeout, read_timeout),
                    allow_redirects=False,
                    stream=True,
                    verify=verify,
                )
            except requests.ConnectionError as exc:
                last = index == min(len(addresses), MAX_ADDRESSES_TRIED) - 1
                if last or not _not_connected(exc):
                    raise
                continue
            response.close()
            return response.status_code
    raise AssertionError("unreachable: the loop returns or raises")


def _not_connected(exc: requests.ConnectionError) -> bool:
    """Whether the request failed before a connection was made (so nothing was sent)."""
    from urllib3.exceptions import ConnectTimeoutError

    reason = getattr(exc.args[0] if exc.args else None, "reason", None)
    return isinstance(exc, requests.ConnectTimeout) or isinstance(reason, ConnectTimeoutError)
