"""Node labels: the one validator (Kubernetes' rules), used by the API, the bulk endpoint and the admin form.

A key is an optional prefix (a lowercase DNS subdomain of at most 253 characters) and ``/``, then a name of
1 to 63 characters of ``[A-Za-z0-9-_.]`` that begins and ends with ``[A-Za-z0-9]``; a value is 0 to 63
characters of the same kind. At most 64 labels a node (docs/api.md#labels). No Django: the selector parser
(fleet/selectors.py) checks its keys and values with the same functions.
"""

from __future__ import annotations

import re
from typing import Any

from core.errors import InvalidInput

MAX_LABELS = 64
NAME_MAX = 63
PREFIX_MAX = 253
_NAME_RE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_PREFIX_RE = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")


def label_key_problem(key: object) -> str | None:
    """Why ``key`` is not a label key, or None when it is one."""
    if not isinstance(key, str):
        return "a key is a string"
    prefix, slash, name = key.rpartition("/")
    if slash:
        if not prefix:
            return "the prefix before '/' is empty"
        if len(prefix) > PREFIX_MAX or not _PREFIX_RE.fullmatch(prefix):
            return f"the prefix is a lowercase DNS subdomain of at most {PREFIX_MAX} characters"
    if not name:
        return "the name is empty"
    if len(name) > NAME_MAX:
        return f"the name is at most {NAME_MAX} characters"
    if not _NAME_RE.fullmatch(name):
        return "the name is [A-Za-z0-9-_.] and begins and ends with [A-Za-z0-9]"
    return None


def label_value_problem(value: object) -> str | None:
    """Why ``value`` is not a label value (the empty string is one), or None."""
    if not isinstance(value, str):
        return "a value is a string"
    if value == "":
        return None
    if len(value) > NAME_MAX:
        return f"a value is at most {NAME_MAX} characters"
    if not _NAME_RE.fullmatch(value):
        return "a value is [A-Za-z0-9-_.] and begins and ends with [A-Za-z0-9]"
    return None


def _refuse(detail: str, *, key: str | None = None) -> InvalidInput:
    extra = {"key": key} if key is not None else {}
    return InvalidInput(detail, code="invalid_labels", **extra)


def labels_validate(labels: Any, *, field: str = "labels") -> dict[str, str]:
    """``labels`` as stored (a dict of str to str), or 400 ``invalid_labels`` naming the first bad key."""
    if not isinstance(labels, dict):
        raise _refuse(f"{field} is an object of string keys to string values.")
    if len(labels) > MAX_LABELS:
        raise _refuse(f"{field} has {len(labels)} labels; a node has at most {MAX_LABELS}.")
    for key, value in labels.items():
        problem = label_key_problem(key)
        if problem is None:
            problem = label_value_problem(value)
            where = f"the value of {key!r}"
        else:
            where = f"the key {key!r}"
        if problem is not None:
            raise _refuse(f"{field}: {where} is invalid: {problem}.", key=str(key))
    return dict(labels)


def label_keys_validate(keys: Any, *, field: str = "remove") -> list[str]:
    """A list of label keys (the bulk endpoint's ``remove``), or 400 ``invalid_labels`` naming the bad key."""
    if not isinstance(keys, list):
        raise _refuse(f"{field} is a list of label keys.")
    for key in keys:
        problem = label_key_problem(key)
        if problem is not None:
            raise _refuse(f"{field}: the key {key!r} is invalid: {problem}.", key=str(key))
    return list(dict.fromkeys(keys))
