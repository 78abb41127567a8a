"""A node's labels on its console page: one key/value row each (and empty rows to add), not a JSON box.

The rows become the dict the API would take; ``NodeLabelsForm.clean_labels`` checks it with the API's one
validator (``fleet.labels.labels_validate``). A row with a value and no key, or a key given twice, is refused.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

#: Empty rows offered under a node's labels, to add that many at once.
EMPTY_ROWS = 3
#: The most rows a form may post (a node holds at most 64 labels: fleet.labels).
MAX_ROWS = 100


class LabelRowsWidget(forms.Widget):
    """Rows of two text boxes, ``<name>-key-<i>`` and ``<name>-value-<i>``; an empty row is no label."""

    def render(self, name: str, value: Any, attrs: dict[str, Any] | None = None, renderer: Any = None) -> SafeString:
        del renderer  # Django's signature; the rows are plain HTML, no template
        pairs = list(value.items()) if isinstance(value, dict) else list(value or [])
        rows = [*pairs, *[("", "")] * EMPTY_ROWS]
        body = format_html_join(
            "",
            '<tr><td><input type="text" name="{0}-key-{1}" value="{2}" aria-label="label key {3}"></td>'
            '<td>=</td><td><input type="text" name="{0}-value-{1}" value="{4}" aria-label="label value {3}"></td></tr>',
            ((name, i, key, i + 1, val) for i, (key, val) in enumerate(rows)),
        )
        return format_html(
            '<table class="console-label-rows" id="id_{}"><thead><tr><th>key</th><th></th><th>value</th></tr>'
            "</thead><tbody>{}</tbody></table>",
            name,
            body,
        )

    def value_from_datadict(self, data: Any, files: Any, name: str) -> list[tuple[str, str]]:
        rows = []
        for i in range(MAX_ROWS):
            key, val = data.get(f"{name}-key-{i}"), data.get(f"{name}-value-{i}")
            if key is None and val is None:
                continue
            rows.append(((key or "").strip(), val or ""))
        return rows

    def value_omitted_from_data(self, data: Any, files: Any, name: str) -> bool:
        return not any(key.startswith(f"{name}-key-") for key in data)


class LabelRowsField(forms.Field):
    """The rows as a dict: empty rows dropped; a value without a key, or a key twice, is an error."""

    widget = LabelRowsWidget

    def to_python(self, value: Any) -> dict[str, str]:
        if isinstance(value, dict):
            return value
        labels: dict[str, str] = {}
        for key, val in value or []:
            if not key and not val:
                continue
            if not key:
                raise forms.ValidationError(f"The value {val!r} has no key.", code="invalid_labels")
            if key in labels:
                raise forms.ValidationError(f"The key {key!r} is given twice.", code="invalid_labels")
            labels[key] = val
        return labels

    def has_changed(self, initial: Any, data: Any) -> bool:
        try:
            return self.to_python(data) != (initial or {})
        except forms.ValidationError:
            return True
