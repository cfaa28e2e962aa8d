"""Dashboard pages. The full live dashboard arrives with its own issue; this is the chat list."""

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from chats.agent.llm import get_provider
from chats.selectors import chats_readable_by


@login_required
def chat_list(request: HttpRequest) -> HttpResponse:
    """Every chat the person belongs to, newest activity first."""
    chats = chats_readable_by(request.user)[:200]
    return render(request, "chats/chat_list.html", {"chats": chats, "model": get_provider().info})
