"""``askcards.mcp.app.transport_security()``: the SDK's own Host/Origin check (DNS rebinding
protection), configured from the settings Django's Host check and askcards' Origin check read.
Exact hosts and origins carry over, checked here by the SDK's own middleware; a pattern the SDK
cannot express turns its check off rather than refusing what askcards' edge accepts."""
from __future__ import annotations

import pytest
from mcp.server.transport_security import TransportSecurityMiddleware

from askcards.mcp.app import transport_security



def _sdk_accepts(policy, host: str, origin: str | None = None) -> bool:
    middleware = TransportSecurityMiddleware(policy)
    return middleware._validate_host(host) and middleware._validate_origin(origin)


def test_exact_hosts_become_the_sdks_hosts_and_origins(settings):
    settings.ALLOWED_HOSTS = ["asks.example.com", "127.0.0.1"]
    settings.ASKCARDS_PUBLIC_URL = "https://public.example.com:8443"
    settings.CSRF_TRUSTED_ORIGINS = ["https://trusted.example.net"]
    policy = transport_security()
    assert policy.enable_dns_rebinding_protection is True
    assert policy.allowed_hosts == ["asks.example.com", "asks.example.com:*", "127.0.0.1", "127.0.0.1:*"]
    assert set(policy.allowed_origins) == {
        "http://asks.example.com", "http://asks.example.com:*",
        "https://asks.example.com", "https://asks.example.com:*",
        "http://127.0.0.1", "http://127.0.0.1:*", "https://127.0.0.1", "https://127.0.0.1:*",
        "https://public.example.com:8443", "https://trusted.example.net",
    }
    assert _sdk_accepts(policy, "asks.example.com:8000", "https://asks.example.com")
    assert _sdk_accepts(policy, "127.0.0.1", "https://public.example.com:8443")
    assert _sdk_accepts(policy, "127.0.0.1")  # no Origin: not a browser
    assert not _sdk_accepts(policy, "evil.example")
    assert not _sdk_accepts(policy, "asks.example.com.evil.example")
    assert not _sdk_accepts(policy, "127.0.0.1", "https://evil.example")
    assert not _sdk_accepts(policy, "127.0.0.1", "https://public.example.com")  # the public URL's port only


@pytest.mark.parametrize("hosts, trusted", [
    (["*"], []),
    ([".example.com"], []),
    (["127.0.0.1", ".example.com"], []),
    (["127.0.0.1"], ["https://*.example.org"]),  # Django's subdomain wildcard: the SDK has no such pattern
])
def test_patterns_the_sdk_cannot_express_turn_its_check_off(hosts, trusted, settings):
    """Django's own Host check and askcards' Origin check still run first on every request."""
    settings.ALLOWED_HOSTS = hosts
    settings.CSRF_TRUSTED_ORIGINS = trusted
    assert transport_security().enable_dns_rebinding_protection is False
