"""Account pages around Django's auth views: the login page a locked-out person sees.

django-axes counts failed logins per username and address (settings: LOGIN_FAILURE_LIMIT,
LOGIN_LOCKOUT_MINUTES) and calls `login_locked_out` instead of authenticating once the pair
is locked: the login page again, with a 429 and a message saying why and for how long.
"""

import math

from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest
from django.shortcuts import render


def client_address(request: HttpRequest) -> str | None:
    """The address a login attempt came from: REMOTE_ADDR, or with TRUSTED_PROXY_COUNT
    proxies in front, the address the outermost of them saw (X-Forwarded-For counted from
    the right, so entries a client put there itself are never used)."""
    count = settings.TRUSTED_PROXY_COUNT
    if count:
        header = request.META.get("HTTP_X_FORWARDED_FOR", "")
        forwarded = [part.strip() for part in header.split(",") if part.strip()]
        if len(forwarded) >= count:
            return forwarded[-count]
    return request.META.get("REMOTE_ADDR")


def lockout_message(minutes: float) -> str:
    """What the login page says to a locked-out username and address."""
    wait = max(1, math.ceil(minutes))
    unit = "minute" if wait == 1 else "minutes"
    return (
        "Too many failed login attempts for this username from your address. "
        f"Try again in {wait} {unit}, or ask an administrator to unlock it."
    )


def login_locked_out(request: HttpRequest, credentials: dict | None = None, *args, **kwargs):
    """The login page with the lockout message (status 429); nothing is authenticated."""
    username = (credentials or {}).get("username") or request.POST.get("username", "")
    form = AuthenticationForm(request, initial={"username": username})
    context = {
        "form": form,
        "next": request.POST.get("next") or request.GET.get("next", ""),
        "locked_out": lockout_message(settings.AXES_COOLOFF_TIME * 60),
        "locked_username": username,
    }
    return render(request, "registration/login.html", context, status=429)
