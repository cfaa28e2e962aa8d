"""What the model saw and which model it is: a reply's context view and the status page.

The context view shows the turn behind one assistant reply (model, status, tokens) and its
prompt report, rendered by the same function as the admin's turn page, so both answer
"why did it forget X?" the same way.
"""

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from chats.agent.llm import provider_info
from chats.models import Channel, Message
from chats.prompt_report import render_prompt_report
from chats.selectors import chat_for_person, chats_readable_by, turn_for_person


def _turn_id(message: Message) -> int | None:
    """The id of the turn that wrote `message` (its `metadata.turn`), if any."""
    turn_id = message.metadata.get("turn") if isinstance(message.metadata, dict) else None
    if not isinstance(turn_id, int) or isinstance(turn_id, bool):
        return None
    return turn_id


@login_required
@require_GET
def message_context(request: HttpRequest, chat_key: str, message_id: int) -> HttpResponse:
    """The turn behind one reply of a chat the person can read, with its prompt report;
    404 for outsiders, unknown messages and messages that no turn wrote."""
    chat = chat_for_person(request.user, chat_key)
    if chat is None:
        raise Http404("No such chat.")
    message = Message.objects.filter(chat=chat, pk=message_id).first()
    turn_id = _turn_id(message) if message is not None else None
    turn = turn_for_person(request.user, turn_id) if turn_id is not None else None
    if turn is None or turn.chat_id != chat.pk:
        raise Http404("This message has no recorded context.")
    context = {
        "chat": chat,
        "message": message,
        "turn": turn,
        "total_tokens": turn.prompt_tokens + turn.completion_tokens,
        "report_html": render_prompt_report(turn.prompt_report),
        "agent_name": settings.AGENT_NAME,
    }
    return render(request, "chats/context.html", context)


@login_required
@require_GET
def status_page(request: HttpRequest) -> HttpResponse:
    """The model in use (with the demo / no-model notice) and how many chats the person has."""
    per_channel = dict(
        chats_readable_by(request.user)
        .order_by()
        .values_list("channel")
        .annotate(total=Count("id"))
        .values_list("channel", "total")
    )
    labels = dict(Channel.choices)
    chat_counts = [
        (channel, labels.get(channel, channel), total)
        for channel, total in sorted(per_channel.items())
    ]
    context = {
        "model": provider_info(),
        "chat_counts": chat_counts,
        "chat_total": sum(per_channel.values()),
    }
    return render(request, "chats/status.html", context)
