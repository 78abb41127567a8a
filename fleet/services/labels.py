"""Node labels and selectors in the database (docs/api.md#labels, docs/api.md#selectors).

A selector (fleet/selectors.py) compiles to one ``Q`` on ``Node.labels`` with jsonb's ``@>`` (equality,
``in``) and ``?`` (presence), the operators the GIN index ``node_labels_gin`` serves. Every reader of the
fleet by labels (the node list, the bulk endpoint, a rollout's snapshot) filters with ``node_selector_q``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from django.db import IntegrityError, models, transaction
from django.db.models import F, Func, Q

from core.errors import InvalidInput, NotFound
from fleet.labels import MAX_LABELS, label_keys_validate, labels_validate
from fleet.models import Node, Pool, Tenant
from fleet.selectors import Operator, Requirement, Selector, SelectorError, selector_parse
from fleet.services.audit import Actor, audit_record

#: The CHECK constraint (fleet migration 0008) that keeps a node at MAX_LABELS labels, whoever writes them.
LABELS_LIMIT_CONSTRAINT = "node_labels_at_most_64"


def selector_validate(text: Any) -> Selector:
    """The parsed selector, or 400 ``invalid_selector`` whose detail says where."""
    try:
        return selector_parse(text)
    except SelectorError as exc:
        raise InvalidInput(f"selector: {exc}.", code="invalid_selector", position=exc.position) from exc


def _requirement_q(requirement: Requirement) -> Q:
    key = requirement.key
    if requirement.operator in (Operator.EXISTS, Operator.DOES_NOT_EXIST):
        present = Q(labels__has_key=key)
        return present if requirement.operator is Operator.EXISTS else ~present
    equal = Q()
    for value in requirement.values:
        equal |= Q(labels__contains={key: value})
    return equal if requirement.operator in (Operator.EQUALS, Operator.IN) else ~equal


def selector_q(selector: Selector) -> Q:
    """A Q on Node: the nodes whose labels satisfy every requirement (the empty selector: every node)."""
    q = Q()
    for requirement in selector.requirements:
        q &= _requirement_q(requirement)
    return q


def node_selector_q(text: str | None) -> Q:
    """``selector_q`` of ``text`` (None or "": every node); 400 ``invalid_selector`` when it does not parse."""
    if text is None:
        return Q()
    return selector_q(selector_validate(text))


def node_labels_set(*, tenant: Tenant, node_id: UUID, labels: Any, actor: Actor | None = None) -> Node:
    """Replace a node's whole label map (``PATCH``), audited as ``node.update`` when it changed."""
    new = labels_validate(labels)
    with transaction.atomic():
        node = Node.objects.select_for_update().filter(tenant=tenant, pk=node_id).first()
        if node is None:
            raise NotFound(f"No node {node_id}.", code="not_found")
        old = dict(node.labels or {})
        if old != new:
            node.labels = new
            node.save(update_fields=["labels"])
            audit_record(
                tenant=tenant,
                actor=actor,
                action="node.update",
                object_type="node",
                object_id=node.pk,
                before={"labels": old},
                after={"labels": new},
            )
    return node


class _LabelsMerged(Func):
    """``(labels || set) - remove``: computed by the database, in the UPDATE itself."""

    output_field = models.JSONField()
    template = "((%(expressions)s || %%s::jsonb) - %%s::text[])"

    def __init__(self, set_labels: dict[str, str], remove: list[str]) -> None:
        super().__init__(F("labels"))
        self.params = (json.dumps(set_labels), remove)

    def as_sql(self, compiler, connection, **extra_context):  # type: ignore[no-untyped-def,override]
        sql, params = super().as_sql(compiler, connection, **extra_context)
        return sql, (*params, *self.params)


def nodes_label(
    *,
    tenant: Tenant,
    selector: Any,
    pool_ids: Sequence[UUID] | None = None,
    set_labels: Any = None,
    remove: Any = None,
    actor: Actor | None = None,
) -> int:
    """Merge ``set_labels`` into, and take ``remove`` out of, every matching node of ``tenant`` (of those
    pools): ONE UPDATE in one transaction, audited as ``node.labels`` on the tenant. Returns how many matched.

    Everything is checked before anything is written; a node that would end with more than 64 labels refuses
    the whole change (the database's CHECK constraint), 400 ``invalid_labels``.
    """
    where = selector_q(selector_validate(selector))
    set_labels = labels_validate({} if set_labels is None else set_labels, field="set")
    remove = label_keys_validate([] if remove is None else remove)
    nodes = Node.objects.filter(where, tenant=tenant)
    if pool_ids is not None:
        ids = list(pool_ids)
        known = set(Pool.objects.filter(tenant=tenant, pk__in=ids).values_list("pk", flat=True))
        unknown = [str(pool_id) for pool_id in ids if pool_id not in known]
        if unknown:
            raise InvalidInput(f"No pool {unknown[0]} in this tenant.", code="unknown_pool", poolIds=unknown)
        nodes = nodes.filter(pool_id__in=ids)
    try:
        with transaction.atomic():
            matched = nodes.update(labels=_LabelsMerged(set_labels, remove))
            audit_record(
                tenant=tenant,
                actor=actor,
                action="node.labels",
                object_type="tenant",
                object_id=tenant.pk,
                after={
                    "selector": selector,
                    "poolIds": None if pool_ids is None else [str(pool_id) for pool_id in pool_ids],
                    "set": set_labels,
                    "remove": remove,
                    "matched": matched,
                },
            )
    except IntegrityError as exc:
        if LABELS_LIMIT_CONSTRAINT not in str(exc):
            raise
        raise InvalidInput(
            f"A matching node would have more than {MAX_LABELS} labels; nothing was changed.", code="invalid_labels"
        ) from exc
    return matched
