"""Which webhook URLs and addresses may be called (docs/webhooks.md): no network beyond /etc/hosts."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rollout.webhooks.transport import UnsafeURL, address_allowed, addresses_checked, check_url, resolve_checked

ip = ipaddress.ip_address

PUBLIC = ["8.8.8.8", "1.1.1.1", "172.32.0.1", "172.15.255.255", "100.128.0.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"]
PRIVATE = [
    "127.0.0.1",
    "127.255.255.254",
    "10.0.0.1",
    "172.16.0.1",
    "172.31.255.255",
    "192.168.1.1",
    "100.64.0.1",
    "100.127.255.254",
    "::1",
    "fc00::1",
    "fd12:3456::1",
    "::ffff:127.0.0.1",  # IPv4-mapped: judged as 127.0.0.1
    "::ffff:10.0.0.1",
    "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
]
NEVER = [
    "169.254.0.1",  # link-local
    "169.254.169.254",  # AWS / GCP / Azure metadata
    "fe80::1",
    "fd00:ec2::254",  # AWS metadata over IPv6, inside fc00::/7
    "100.100.100.200",  # Alibaba metadata, inside 100.64/10
    "168.63.129.16",  # Azure wire server
    "::ffff:169.254.169.254",
    "2002:a9fe:a9fe::1",  # 6to4 of 169.254.169.254
    "0.0.0.0",  # noqa: S104 - an address under test, nothing binds it
    "0.1.2.3",
    "::",
    "224.0.0.1",
    "239.255.255.250",
    "ff02::1",
    "240.0.0.1",
    "255.255.255.255",
    "fec0::1",
    "192.0.2.1",  # documentation and benchmarking ranges are not anybody's receiver
    "198.51.100.1",
    "203.0.113.1",
    "198.18.0.1",
    "2001:db8::1",
]


@pytest.mark.parametrize(
    ("address", "strict", "relaxed"),
    [(a, True, True) for a in PUBLIC] + [(a, False, True) for a in PRIVATE] + [(a, False, False) for a in NEVER],
)
def test_address_classes(address, strict, relaxed):
    assert address_allowed(ip(address), allow_private=False) is strict
    assert address_allowed(ip(address), allow_private=True) is relaxed


def test_unsafe_url_is_a_value_error_with_a_code_and_a_sentence():
    with pytest.raises(UnsafeURL) as caught:
        check_url("ftp://example.com/", allow_http=False)
    assert isinstance(caught.value, ValueError)
    assert caught.value.code == "invalid_url"
    assert str(caught.value).endswith(".")


ACCEPTED = [
    ("https://example.com/hook", False),
    ("https://example.com:8443/a/b?c=d&e", False),
    ("HTTPS://Example.COM/hook", False),
    ("https://example.com./hook", False),
    ("https://bücher.example/hook", False),  # IDNA-encoded
    ("https://8.8.8.8/hook", False),
    ("https://[2606:4700:4700::1111]/hook", False),
    ("https://example.com", False),
    ("http://127.0.0.1:8000/hook", True),
    ("http://localhost:8000/hook", True),
    ("http://[::1]:8000/hook", True),
    ("http://10.1.2.3/hook", True),
    ("https://example.com/" + "a" * 1980, False),  # exactly 2000 characters
]


@pytest.mark.parametrize(("url", "allow_http"), ACCEPTED)
def test_accepted_urls(url, allow_http):
    check_url(url, allow_http=allow_http)


REFUSED = [
    ("http://example.com/hook", False, "https://"),
    ("ftp://example.com/hook", True, "http(s)"),
    ("javascript:alert(1)", True, "http(s)"),
    ("file:///etc/passwd", True, "http(s)"),
    ("example.com/hook", False, "https://"),
    ("", False, "https://"),
    ("https://user:pass@example.com/", False, "user name"),
    ("https://user@example.com/", False, "user name"),
    ("https://example.com@169.254.169.254/", True, "user name"),
    ("https://example.com/hook#frag", False, "fragment"),
    ("https://example.com/hook#", False, "fragment"),
    ("https:///hook", False, "no host"),
    ("https://:443/hook", False, "no host"),
    ("https://example.com:0/", False, "port"),
    ("https://example.com:99999/", False, "parsed"),
    ("https://example.com:http/", False, "parsed"),
    ("https://[::1/", True, "parsed"),
    ("https://example.com/" + "a" * 1981, False, "longer than 2000"),
    ("https://exa mple.com/", False, "spaces"),
    ("https://example.com/\thook", False, "spaces"),
    ("https://example.com\\@evil.com/", False, "backslashes"),
    ("https://example.com/\x00", False, "control"),
    ("https://\udcff.example/", False, "not valid text"),  # a lone surrogate
    ("https://example.com/\ud800", False, "not valid text"),
    ("https://xn--.example/", False, "host name"),
    ("https://a..b/", False, "host name"),
    ("https://-bad.example/", False, "host name"),
    ("https://%31%32%37.0.0.1/", True, "host name"),
    ("https://" + "a" * 64 + ".example/", False, "host name"),
    ("https://\u2488.example/", False, "internationalised"),  # ⒈ is disallowed by IDNA 2008
    ("https://ex\u200dample.com/", False, "internationalised"),  # zero-width joiner outside its context
    ("https://example.com/caf\u00e9", False, "ASCII"),
    ("https://127.1/", True, "IP address"),
    ("https://2130706433/", True, "IP address"),
    ("https://0x7f.0.0.1/", True, "IP address"),
    ("https://127.0.0.1/hook", False, "may not call"),
    ("https://[::1]/hook", False, "may not call"),
    ("https://10.0.0.1/hook", False, "may not call"),
    ("https://localhost/hook", False, "may not call"),
    ("https://api.localhost/hook", False, "may not call"),
    ("https://\uff11\uff12\uff17.0.0.1/", False, "may not call"),  # full-width digits map to 127.0.0.1
    ("http://169.254.169.254/latest/meta-data/", True, "may not call"),
    ("http://[fd00:ec2::254]/", True, "may not call"),
    ("http://100.100.100.200/", True, "may not call"),
    ("http://[::ffff:169.254.169.254]/", True, "may not call"),
    ("http://[fe80::1%25eth0]/", True, "zone"),
    ("http://0.0.0.0:8000/", True, "may not call"),
    ("http://[::]:8000/", True, "may not call"),
]


@pytest.mark.parametrize(("url", "allow_http", "says"), REFUSED)
def test_refused_urls(url, allow_http, says):
    with pytest.raises(UnsafeURL) as caught:
        check_url(url, allow_http=allow_http)
    assert says in str(caught.value)


def _verdict(url: str) -> str:
    try:
        check_url(url, allow_http=True)
    except UnsafeURL as exc:
        return exc.code
    return "accepted"


@given(st.text(max_size=300))
def test_any_text_is_accepted_or_refused_with_unsafe_url(text):
    """Surrogates, controls, odd Unicode: the only exception check_url lets out is UnsafeURL."""
    for candidate in (text, "https://" + text, "http://" + text + "/hook"):
        assert _verdict(candidate) in ("accepted", "invalid_url")


def test_non_string_is_refused():
    with pytest.raises(UnsafeURL):
        check_url(b"https://example.com/", allow_http=False)  # type: ignore[arg-type]


def test_resolve_checked_localhost_only_when_private_allowed():
    assert ip("127.0.0.1") in resolve_checked("localhost", 80, allow_private=True)
    with pytest.raises(UnsafeURL, match="may not call"):
        resolve_checked("localhost", 80, allow_private=False)


def test_resolve_checked_ip_literals_and_idna_digits():
    assert resolve_checked("8.8.8.8", 443, allow_private=False) == [ip("8.8.8.8")]
    assert resolve_checked("\uff11\uff12\uff17.0.0.1", 80, allow_private=True) == [ip("127.0.0.1")]
    with pytest.raises(UnsafeURL):
        resolve_checked("169.254.169.254", 80, allow_private=True)
    with pytest.raises(UnsafeURL):
        resolve_checked("\udcff", 80, allow_private=True)


def test_one_bad_address_refuses_them_all():
    """A name answering both a public and an internal address is what a rebinding attacker serves."""
    with pytest.raises(UnsafeURL, match="may not call"):
        addresses_checked([ip("8.8.8.8"), ip("10.0.0.1")], allow_private=False)
    with pytest.raises(UnsafeURL, match="may not call"):
        addresses_checked([ip("127.0.0.1"), ip("169.254.169.254")], allow_private=True)
    with pytest.raises(UnsafeURL, match="does not resolve"):
        addresses_checked([], allow_private=True)
    assert addresses_checked([ip("8.8.8.8"), ip("1.1.1.1"), ip("8.8.8.8")], allow_private=False) == [
        ip("8.8.8.8"),
        ip("1.1.1.1"),
    ]
