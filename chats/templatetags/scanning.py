"""Template filter for pages where people approve text:
``{% load scanning %}{{ entry.text|reveal_hidden }}``."""

from django import template

from hermes_site.scanning import reveal_hidden

register = template.Library()


@register.filter(name="reveal_hidden")
def reveal_hidden_filter(value: object) -> str:
    """Hidden code points shown as ``⟦U+200B⟧`` markers (tag text decoded); the result is a
    plain string, so autoescaping still applies; ``None`` renders as nothing."""
    return reveal_hidden("" if value is None else str(value))
