"""The settings page where a person creates, names and revokes their own personal keys."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_http_methods, require_POST

from openai_api.forms import PersonalKeyForm
from openai_api.keys import (
    MAX_ACTIVE_KEYS,
    KeyLimitReached,
    personal_key_create,
    personal_key_revoke,
    personal_keys,
)


@login_required
@require_http_methods(["GET", "POST"])
def keys_page(request: HttpRequest) -> HttpResponse:
    """Lists the person's keys; a valid POST creates one and shows it on this response only."""
    form = PersonalKeyForm(request.POST or None)
    raw_key = None
    status = 200
    if request.method == "POST":
        if form.is_valid():
            try:
                _, raw_key = personal_key_create(
                    person=request.user,
                    name=form.cleaned_data["name"],
                    expires_at=form.cleaned_data["expires_at"],
                )
                form = PersonalKeyForm()
                status = 201
            except KeyLimitReached:
                form.add_error(None, f"You may hold at most {MAX_ACTIVE_KEYS} active keys.")
                status = 400
        else:
            status = 400
    context = {
        "form": form,
        "keys": personal_keys(request.user),
        "raw_key": raw_key,
        "base_url": request.build_absolute_uri("/v1"),
    }
    response = render(request, "openai_api/keys.html", context, status=status)
    add_never_cache_headers(response)  # the new key must not stay in any cache
    return response


@login_required
@require_POST
def key_revoke(request: HttpRequest, key_id: int) -> HttpResponse:
    """Revokes one of the person's own keys; anyone else's is a 404."""
    if not personal_key_revoke(person=request.user, key_id=key_id):
        raise Http404("No such key of yours.")
    messages.success(request, "The key is revoked: clients using it now get 401.")
    return redirect("personal_keys")
