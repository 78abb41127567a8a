"""core/ranges.py against RFC 9110's examples (sections 14.1.2, 14.4, 13.1.5), and the choices it shares with nginx."""

import pytest

from core.ranges import UNSATISFIABLE, WHOLE, ByteRange, requested_range, unsatisfied_content_range

SIZE = 10_000  # RFC 9110 14.1.2: "a representation of length 10000"
ETAG = '"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"'


@pytest.mark.parametrize(
    ("header", "first", "last"),
    [
        ("bytes=0-499", 0, 499),  # "The first 500 bytes"
        ("bytes=500-999", 500, 999),  # "The second 500 bytes"
        ("bytes=-500", 9500, 9999),  # "The final 500 bytes (byte offsets 9500-9999, inclusive)"
        ("bytes=9500-", 9500, 9999),  # the same
        ("bytes=0-0", 0, 0),
        ("bytes=9999-9999", 9999, 9999),
        ("bytes=0-20000", 0, 9999),  # last-pos past the end: "the remainder of the representation"
        ("bytes=-20000", 0, 9999),  # a suffix longer than the representation: all of it
        ("Bytes=1-2", 1, 2),  # range units compare case-insensitively
        ("bytes= 1 - 2 ", 1, 2),
        ("bytes=007-008", 7, 8),
    ],
)
def test_one_satisfiable_range(header, first, last):
    wanted = requested_range(header, size=SIZE)
    assert wanted == ByteRange(start=first, end=last, size=SIZE)
    assert wanted.length == last - first + 1
    assert wanted.content_range == f"bytes {first}-{last}/{SIZE}"  # 14.4: "bytes 42-1233/1234"


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "bytes=",  # no range set: ignored
        "items=0-1",  # a unit other than bytes: ignored
        "bytes=0-0,-1",  # "The first and last bytes only": two ranges, so the whole
        "bytes=500-600,601-999",  # "other valid (but not canonical) specifications of the second 500 bytes"
        "bytes=500-700,601-999",
        "bytes=0-1,2-3,x",  # settled at the second range, as nginx reads it
    ],
)
def test_the_whole_representation(header):
    assert requested_range(header, size=SIZE) is WHOLE


@pytest.mark.parametrize(
    "header",
    [
        f"bytes={SIZE}-",  # first-pos at the length: unsatisfiable
        "bytes=20000-30000",
        "bytes=-0",  # a suffix-range is satisfiable only with a non-zero suffix-length
        "bytes=10000-,20000-",
        "bytes=5-3",  # invalid (last-pos < first-pos): rejected
        "bytes=abc",
        "bytes=1",
        "bytes=-",
        "bytes=0-1,x",
        "bytes=+1-2",
        "bytes=\u0661-\u0662",  # Arabic-Indic digits: isdigit() but not ASCII
        f"bytes=0-{2**63}",  # past any file offset
    ],
)
def test_unsatisfiable_or_malformed(header):
    assert requested_range(header, size=SIZE) is UNSATISFIABLE
    assert unsatisfied_content_range(SIZE) == "bytes */10000"  # 14.4: "bytes */1234"


def test_an_empty_representation_is_sent_whole():
    for header in ("bytes=0-", "bytes=-5", "bytes=0-0"):
        assert requested_range(header, size=0) is WHOLE
    assert requested_range("bytes=1-", size=0) is UNSATISFIABLE


def test_if_range_honours_the_range_only_for_the_current_entity_tag():
    """13.1.5: a matching strong validator gets the range; anything else gets the whole representation."""
    assert requested_range("bytes=100-", size=SIZE, if_range=ETAG, etag=ETAG) == ByteRange(100, 9999, SIZE)
    for stale in ('"0123"', f"W/{ETAG}", "Tue, 01 Dec 2026 10:00:00 GMT", ""):
        assert requested_range("bytes=100-", size=SIZE, if_range=stale, etag=ETAG) is WHOLE, stale
    assert requested_range("bytes=100-", size=SIZE, if_range=ETAG, etag=None) is WHOLE
    # Checked before the range itself, as nginx does: a stale copy gets the whole even for a bad range.
    assert requested_range("bytes=abc", size=SIZE, if_range='"0123"', etag=ETAG) is WHOLE
    assert requested_range(None, size=SIZE, if_range=ETAG, etag=ETAG) is WHOLE  # no Range: If-Range ignored
