"""Byte ranges of a representation of known size: ``Range`` and ``If-Range`` (RFC 9110 sections 14 and 13.1.5).

Written once, for the downloads Django serves itself (docs/api.md#binary-downloads). nginx serves
the same downloads in the production tier, so where RFC 9110 leaves a choice this module makes
nginx's, and a client sees one behaviour whatever answers it:

- a unit other than ``bytes`` (compared case-insensitively), or an empty range set: the header is
  ignored (200, the whole representation);
- a malformed range set (``bytes=5-3``, ``bytes=abc``): rejected, 416 (RFC 9110 allows ignoring or
  rejecting an invalid one);
- more than one satisfiable range: the header is ignored (200): one range per request, as agents
  resume (nginx's ``max_ranges 1``);
- no satisfiable range (``bytes=size-``, ``bytes=-0``): 416 with ``Content-Range: bytes */size``;
- ``If-Range`` is honoured only when it is the current entity tag, compared strongly; a date never
  matches (no Last-Modified is sent), so it gets the whole representation.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

MAX_POSITION = 2**63 - 1  # nginx's limit (off_t): a larger position is malformed


class Whole(enum.Enum):
    """Serve the whole representation (200): no usable ``Range``."""

    WHOLE = "whole"


class Unsatisfiable(enum.Enum):
    """Answer 416 with ``Content-Range: bytes */size``."""

    UNSATISFIABLE = "unsatisfiable"


WHOLE = Whole.WHOLE
UNSATISFIABLE = Unsatisfiable.UNSATISFIABLE


@dataclass(frozen=True)
class ByteRange:
    """Bytes ``start`` to ``end`` inclusive, of a representation of ``size`` bytes."""

    start: int
    end: int
    size: int

    @property
    def length(self) -> int:
        return self.end - self.start + 1

    @property
    def content_range(self) -> str:
        return f"bytes {self.start}-{self.end}/{self.size}"


def unsatisfied_content_range(size: int) -> str:
    return f"bytes */{size}"


class _Malformed(Exception):
    pass


def requested_range(
    range_header: str | None, *, size: int, if_range: str | None = None, etag: str | None = None
) -> ByteRange | Whole | Unsatisfiable:
    """What to send for a ``Range`` header (and its ``If-Range``) on a representation of ``size`` bytes.

    ``etag`` is the representation's strong entity tag, quotes included (``"<sha256>"``).
    """
    if range_header is None or len(range_header) < 7 or range_header[:6].lower() != "bytes=":
        return WHOLE
    if if_range is not None and (etag is None or if_range.strip() != etag):
        return WHOLE  # the client's copy is not this representation: it needs all of it
    try:
        return _one_range(range_header[6:], size)
    except _Malformed:
        return UNSATISFIABLE


def _one_range(range_set: str, size: int) -> ByteRange | Whole | Unsatisfiable:
    """The range set read left to right, deciding as nginx does at the first spec that settles it."""
    found: ByteRange | None = None
    for spec in range_set.split(","):
        first, dash, last = spec.strip(" ").partition("-")
        first, last = first.strip(" "), last.strip(" ")
        if not dash or (not first and not last):
            raise _Malformed
        if not first:  # a suffix range: the last N bytes
            count = _position(last)
            start, stop = max(0, size - count), size
        else:
            start = _position(first)
            stop = size if not last else min(_position(last) + 1, size)
        if start < stop:
            if found is not None:
                return WHOLE  # a second range: one range per request, so the whole representation
            found = ByteRange(start=start, end=stop - 1, size=size)
        elif start == 0:
            return WHOLE  # any range of an empty representation: it is sent whole (and empty)
    return found if found is not None else UNSATISFIABLE


def _position(digits: str) -> int:
    if not digits.isascii() or not digits.isdigit():
        raise _Malformed
    value = int(digits)
    if value > MAX_POSITION:
        raise _Malformed
    return value
