"""Dashboard pages: the chat list, a chat's page with its composer and its members panel.

One template per page with named partials; htmx requests get the partial
(`"chats/chat.html#message"`, `#older`, `#members`, `#composer_error`). Live updates arrive
over the chat's WebSocket (chats/consumers.py): static/js/chat.js fetches the HTML of each
new message from `chat_message`.
"""

import uuid
from functools import wraps
from urllib.parse import quote

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import OuterRef, Subquery
from django.db.models.functions import Substr
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseClientRedirect, reswap, retarget

from chats.agent.events import last_seq
from chats.agent.holds import chat_stop
from chats.agent.llm import provider_info
from chats.agent.turns import message_received, turn_stop
from chats.extras import composer_extras_html, with_extras_html
from chats.forms import MemberAddForm, MessagePostForm, RoomCreateForm
from chats.models import Channel, Chat, ChatKind, ChatMember, Message
from chats.person_notices import person_notice_dismiss, person_notices_open
from chats.ratelimit import window_retry_after
from chats.selectors import (
    chat_for_person,
    chat_may_post,
    chat_members,
    chat_messages_page,
    chat_role,
    chats_readable_by,
)
from chats.services import (
    IngestError,
    LastOwnerError,
    MemberNotFound,
    chat_get_or_create,
    chat_member_ensure,
    chat_member_remove,
    message_ingest,
    person_actor_id,
)

PAGE_SIZE = 50
# A search hit opens the chat with the page extended down to it (and a few messages before
# it, for context) as long as that is at most this many messages; a hit further back is
# shown on its own above the newest page, with the way to scroll back to it.
JUMP_MAX_MESSAGES = 1000
JUMP_CONTEXT = 5
PREVIEW_CHARS = 160
MANAGER_ROLES = frozenset({ChatMember.Role.OWNER, ChatMember.Role.ADMIN})
# Only web rooms take messages from the page for now: a Telegram group, a CLI profile or an
# API conversation is answered where it lives (its adapter delivers the reply there).
POSTABLE_CHANNELS = frozenset({Channel.WEB})
NOT_IN_PREVIEW = (Message.Role.TOOL, Message.Role.MARKER, Message.Role.SYSTEM)


def _chat_or_404(request: HttpRequest, chat_key: str) -> Chat:
    """Outsiders and unknown keys get the same 404: a chat's existence never leaks."""
    chat = chat_for_person(request.user, chat_key)
    if chat is None:
        raise Http404("No such chat.")
    return chat


def _message_context(chat: Chat) -> dict:
    return {"chat": chat, "agent_name": settings.AGENT_NAME}


def _with_last_message(chats):
    """Annotate each chat with its last visible message, in the same query as the chats."""
    last = (
        Message.objects.filter(chat=OuterRef("pk")).exclude(role__in=NOT_IN_PREVIEW).order_by("-id")
    )
    return chats.annotate(
        last_text=Subquery(
            last.annotate(snippet=Substr("text", 1, PREVIEW_CHARS)).values("snippet")[:1]
        ),
        last_role=Subquery(last.values("role")[:1]),
        last_author=Subquery(last.values("actor__display_name")[:1]),
    )


@login_required
def chat_list(request: HttpRequest) -> HttpResponse:
    """Every chat the person belongs to, newest activity first, with its last message."""
    chats = _with_last_message(chats_readable_by(request.user))[:200]
    return render(
        request,
        "chats/chat_list.html",
        {
            "chats": chats,
            "model": provider_info(),
            "room_form": RoomCreateForm(),
            "agent_name": settings.AGENT_NAME,
            "notices": person_notices_open(request.user),
        },
    )


@login_required
@require_POST
def notice_dismiss(request: HttpRequest, notice_id: int) -> HttpResponse:
    """Dismiss one of the person's own dashboard notices (anyone else's is a 404)."""
    if not person_notice_dismiss(person=request.user, notice_id=notice_id):
        raise Http404("No such notice.")
    return redirect("chat_list")


@login_required
@require_POST
def room_create(request: HttpRequest) -> HttpResponse:
    """Create a web room; its creator is its owner."""
    form = RoomCreateForm(request.POST)
    if not form.is_valid():
        chats = _with_last_message(chats_readable_by(request.user))[:200]
        context = {
            "chats": chats,
            "model": provider_info(),
            "room_form": form,
            "agent_name": settings.AGENT_NAME,
        }
        return render(request, "chats/chat_list.html", context, status=400)
    with transaction.atomic():
        chat, _ = chat_get_or_create(
            channel=Channel.WEB,
            chat_id=uuid.uuid4().hex,
            kind=ChatKind.ROOM,
            title=form.cleaned_data["title"],
        )
        chat_member_ensure(chat=chat, person=request.user, role=ChatMember.Role.OWNER)
    return redirect("chat_page", chat_key=chat.chat_key)


def _members_context(chat: Chat, role: str | None, error: str = "") -> dict:
    members = chat_members(chat)
    return {
        "chat": chat,
        "role": role,
        "members": members,
        "owner_count": sum(1 for m in members if m.role == ChatMember.Role.OWNER),
        "members_error": error,
        "member_form": MemberAddForm(),
    }


def _page_size_to_reach(chat: Chat, at: int | None) -> tuple[int, Message | None]:
    """How many of the newest messages the page shows so that message `at` is among them
    (with JUMP_CONTEXT before it), and the message itself when it is too far back for that."""
    if at is None:
        return PAGE_SIZE, None
    target = Message.objects.filter(chat=chat, pk=at).select_related("actor", "reply_to").first()
    if target is None:
        return PAGE_SIZE, None
    newer = Message.objects.filter(chat=chat, pk__gte=at).count()
    if newer <= PAGE_SIZE - JUMP_CONTEXT:
        return PAGE_SIZE, None
    if newer + JUMP_CONTEXT <= JUMP_MAX_MESSAGES:
        return newer + JUMP_CONTEXT, None
    return PAGE_SIZE, target


def _page_context(
    request: HttpRequest, chat: Chat, *, before: int | None = None, at: int | None = None
) -> dict:
    # The sequence number is read before the messages: every event after it is replayed to
    # the page's socket, and messages already on the page are skipped by their id.
    seq = last_seq(chat.pk) if before is None else 0
    size, far_message = _page_size_to_reach(chat, at if before is None else None)
    page = chat_messages_page(chat, before=before, limit=size + 1)
    has_older = len(page) > size
    messages = page[1:] if has_older else page
    with_extras_html([*messages, far_message], request.user)
    context = _message_context(chat)
    context.update(messages=messages, has_older=has_older, far_message=far_message)
    if before is not None:
        return context
    role = chat_role(request.user, chat)
    can_manage = role in MANAGER_ROLES
    if can_manage:
        context.update(_members_context(chat, role))
    can_post = chat.channel in POSTABLE_CHANNELS
    context.update(
        role=role,
        can_manage=can_manage,
        can_post=can_post,
        composer_extras=composer_extras_html(chat, request.user) if can_post else "",
        last_seq=seq,
        ws_path=f"/ws/chats/{quote(chat.chat_key, safe='/:@')}/",
        message_form=MessagePostForm(),
    )
    return context


def _int_param(value: str | None) -> int | None:
    try:
        number = int(value) if value else None
    except ValueError:
        return None
    return number if number is None or number > 0 else None


@login_required
@require_GET
def chat_page(request: HttpRequest, chat_key: str) -> HttpResponse:
    """A chat's newest messages, composer and (for owners/admins) members; with `?before=<id>`
    from htmx, only the older page (`#older`); with `?at=<id>` (a search hit), the page reaches
    back to that message."""
    chat = _chat_or_404(request, chat_key)
    before = _int_param(request.GET.get("before"))
    if before is not None and request.htmx:
        response = render(
            request, "chats/chat.html#older", _page_context(request, chat, before=before)
        )
    else:
        at = _int_param(request.GET.get("at"))
        response = render(request, "chats/chat.html", _page_context(request, chat, at=at))
    patch_vary_headers(response, ["HX-Request"])
    return response


@login_required
@require_GET
def chat_message(request: HttpRequest, chat_key: str, message_id: int) -> HttpResponse:
    """One message of a chat the person can read, rendered as on the page."""
    chat = _chat_or_404(request, chat_key)
    message = (
        Message.objects.select_related("actor", "reply_to").filter(chat=chat, pk=message_id).first()
    )
    if message is None:
        raise Http404("No such message.")
    with_extras_html([message], request.user)
    context = _message_context(chat) | {"message": message}
    return render(request, "chats/chat.html#message", context)


def _composer_error(
    request: HttpRequest, chat: Chat, error: str, *, status: int = 400
) -> HttpResponse:
    if request.htmx:
        context = {"composer_error": error}
        response = render(request, "chats/chat.html#composer_error", context, status=status)
        return reswap(retarget(response, "#composer-error"), "outerHTML")
    context = _page_context(request, chat) | {"composer_error": error}
    return render(request, "chats/chat.html", context, status=status)


def _post_rate_limited(view):
    """Refuse a person's posts beyond WEB_POST_RATE_LIMIT_PER_MINUTE with a 429 and a message
    in the composer; nothing is stored. Counted in Redis per person; open when Redis is down."""

    @wraps(view)
    def limited(request: HttpRequest, chat_key: str, *args, **kwargs) -> HttpResponse:
        retry_after = window_retry_after(
            scope="web-post",
            key=str(request.user.pk),
            limit=settings.WEB_POST_RATE_LIMIT_PER_MINUTE,
        )
        if retry_after is None:
            return view(request, chat_key, *args, **kwargs)
        chat = _chat_or_404(request, chat_key)
        error = f"You are sending messages too fast: wait {retry_after} s, then send it again."
        response = _composer_error(request, chat, error, status=429)
        response["Retry-After"] = str(retry_after)
        return response

    return limited


@login_required
@require_POST
@_post_rate_limited
def message_post(request: HttpRequest, chat_key: str) -> HttpResponse:
    """Store a member's message in a web room once per client id and request the agent's
    turn; answers the rendered message (201, or 200 for a repeated submit)."""
    chat = _chat_or_404(request, chat_key)
    if chat.channel not in POSTABLE_CHANNELS:
        raise PermissionDenied("Messages can be posted from the web into web rooms only.")
    verdict = chat_may_post(request.user, chat)
    if not verdict:
        raise PermissionDenied(f"You may not post here: {verdict.reason}.")
    form = MessagePostForm(request.POST)
    if not form.is_valid():
        field, errors = next(iter(form.errors.items()))
        return _composer_error(request, chat, errors[0] if field == "text" else "Send it again.")
    person = request.user
    client_id = form.cleaned_data["client_id"] or uuid.uuid4()
    try:
        result = message_ingest(
            channel=chat.channel,
            chat_id=chat.external_id,
            thread_id=chat.thread_id or None,
            user_id=person_actor_id(person),
            user_name=person.get_full_name() or person.get_username(),
            person=person,
            text=form.cleaned_data["text"],
            message_id=str(client_id),
        )
    except IngestError as exc:
        return _composer_error(request, chat, str(exc))
    message_received(result)
    if not request.htmx:
        url = reverse("chat_page", kwargs={"chat_key": chat.chat_key})
        return redirect(f"{url}#message-{result.message.pk}")
    shown = with_extras_html([result.message], request.user)[0]
    context = _message_context(chat) | {"message": shown}
    return render(
        request, "chats/chat.html#message", context, status=201 if result.created else 200
    )


def _managed_chat(request: HttpRequest, chat_key: str) -> tuple[Chat, str]:
    """The chat and the person's role if they own or administer it: outsiders 404, others 403."""
    chat = _chat_or_404(request, chat_key)
    role = chat_role(request.user, chat)
    if role not in MANAGER_ROLES:
        raise PermissionDenied("Only the chat's owners and admins manage its members.")
    return chat, role


def _members_response(request, chat, role, *, error: str = "") -> HttpResponse:
    if not request.htmx:
        if error:
            context = _page_context(request, chat) | {"members_error": error}
            return render(request, "chats/chat.html", context, status=400)
        return redirect("chat_page", chat_key=chat.chat_key)
    context = _members_context(chat, role, error)
    return render(request, "chats/chat.html#members", context, status=400 if error else 200)


@login_required
@require_POST
def member_add(request: HttpRequest, chat_key: str) -> HttpResponse:
    """Add an active person, by username, as a member (an existing role is kept)."""
    chat, role = _managed_chat(request, chat_key)
    form = MemberAddForm(request.POST)
    if not form.is_valid():
        return _members_response(request, chat, role, error="Enter a username.")
    username = form.cleaned_data["username"]
    person = get_user_model().objects.filter(username=username, is_active=True).first()
    if person is None:
        return _members_response(request, chat, role, error=f"Nobody is called “{username}”.")
    chat_member_ensure(chat=chat, person=person, role=ChatMember.Role.MEMBER)
    return _members_response(request, chat, role)


@login_required
@require_POST
def member_remove(request: HttpRequest, chat_key: str, person_id: int) -> HttpResponse:
    """Remove a member; only owners remove owners, and the last owner stays."""
    chat, role = _managed_chat(request, chat_key)
    try:
        chat_member_remove(chat=chat, person_id=person_id, by_role=role)
    except MemberNotFound:
        raise Http404("No such member.") from None
    except LastOwnerError as refusal:
        return _members_response(request, chat, role, error=str(refusal))
    if person_id == request.user.pk:  # left the chat: its page is a 404 from now on
        if request.htmx:
            return HttpResponseClientRedirect(reverse("chat_list"))
        return redirect("chat_list")
    return _members_response(request, chat, role)


@login_required
@require_POST
def turn_stop_view(request: HttpRequest, chat_key: str, turn_id: int) -> HttpResponse:
    """The Stop button: any member may stop the agent's reply in their chat (204), others 404."""
    chat = _chat_or_404(request, chat_key)
    name = request.user.get_full_name() or request.user.get_username()
    if not turn_stop(turn_id=turn_id, chat=chat, reason=f"stopped by {name}"):
        return HttpResponse(status=409)
    return HttpResponse(status=204)


@login_required
@require_POST
def chat_stop_view(request: HttpRequest, chat_key: str) -> HttpResponse:
    """Stop everything the agent does or is about to do in the chat (204; 409: nothing): its
    running, waiting and queued turns, and a message whose turn is held for its files (it
    stays, with no turn). Any member; others 404."""
    chat = _chat_or_404(request, chat_key)
    name = request.user.get_full_name() or request.user.get_username()
    if not chat_stop(chat=chat, reason=f"stopped by {name}"):
        return HttpResponse(status=409)
    return HttpResponse(status=204)
