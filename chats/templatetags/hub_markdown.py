"""Template filters for chat content: ``{% load hub_markdown %}{{ message.text|markdown }}``."""

from django import template
from django.utils.safestring import SafeString

from chats.markdown import render_markdown

register = template.Library()


@register.filter(name="markdown")
def markdown_filter(value: object) -> SafeString:
    """Render a message's Markdown to sanitised HTML; ``None`` renders as nothing."""
    return render_markdown("" if value is None else str(value))
