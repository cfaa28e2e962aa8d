"""The Telegram webhook and the dashboard's Telegram page (link codes; staff: pairings)."""

import json
import logging
from hmac import compare_digest

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from bots.models import BotState, PairingRequest
from bots.pairing import link_code_create, pairing_decide, pairing_revoke
from bots.selectors import pairing_requests, telegram_actors_of
from bots.services import telegram_update_process
from bots.updates import BadUpdate

logger = logging.getLogger(__name__)
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"


@csrf_exempt
def telegram_webhook(request: HttpRequest) -> HttpResponse:
    """Telegram POSTs one update; it is processed exactly once (the same service as polling)
    and answered 200 at once. 404 when the webhook is not configured, 403 without the secret."""
    if not (settings.TELEGRAM_BOT_TOKEN and settings.TELEGRAM_WEBHOOK_SECRET):
        raise Http404("The Telegram webhook is not configured.")
    if request.method != "POST":
        return JsonResponse(
            {"ok": False, "error": "Use POST."}, status=405, headers={"Allow": "POST"}
        )
    secret = request.headers.get(SECRET_HEADER, "")
    if not compare_digest(secret.encode(), settings.TELEGRAM_WEBHOOK_SECRET.encode()):
        return JsonResponse({"ok": False, "error": "Wrong secret token."}, status=403)
    try:
        data = json.loads(request.body)
    except RequestDataTooBig:
        return JsonResponse({"ok": False, "error": "Update too large."}, status=413)
    except (ValueError, UnicodeDecodeError):
        return JsonResponse({"ok": False, "error": "The body is not JSON."}, status=400)
    try:
        outcome = telegram_update_process(data)
    except BadUpdate as exc:
        return JsonResponse({"ok": False, "error": str(exc)}, status=400)
    return JsonResponse({"ok": True, "result": outcome.result})


def _bot_username() -> str:
    if not settings.TELEGRAM_BOT_TOKEN:
        return ""
    return BotState.objects.order_by("-updated_at").values_list("username", flat=True).first() or ""


def _page(request: HttpRequest, *, code: str = "", status: int = 200) -> HttpResponse:
    context = {
        "configured": bool(settings.TELEGRAM_BOT_TOKEN),
        "bot_username": _bot_username(),
        "linked": telegram_actors_of(person=request.user),
        "code": code,
        "code_minutes": settings.TELEGRAM_LINK_CODE_TTL_MINUTES,
    }
    if request.user.is_staff:
        context["pending"] = pairing_requests(status=PairingRequest.Status.PENDING)
        context["approved"] = pairing_requests(status=PairingRequest.Status.APPROVED)
    return render(request, "bots/telegram.html", context, status=status)


@login_required
def telegram_page(request: HttpRequest) -> HttpResponse:
    """Your linked Telegram accounts and a link code; for staff, the pairing requests."""
    return _page(request)


@login_required
@require_POST
def link_code_view(request: HttpRequest) -> HttpResponse:
    """Create a one-time /link code for the logged-in person (shown once)."""
    _, code = link_code_create(person=request.user)
    return _page(request, code=code)


@login_required
@require_POST
def pairing_decide_view(request: HttpRequest, request_id: int, decision: str) -> HttpResponse:
    """Staff approve or reject a pending pairing request, or revoke an approval."""
    if not request.user.is_staff:
        raise PermissionDenied("Only staff decide pairing requests.")
    if decision == "revoke":
        pairing_revoke(request_id=request_id, staff=request.user)
    elif decision in ("approve", "reject"):
        pairing_decide(request_id=request_id, approve=decision == "approve", staff=request.user)
    else:
        raise Http404("Unknown decision.")
    return redirect("telegram_page")
