"""Which of the hub's environment variables a tool server may be given by reference
(`{"env": NAME}`, written `NAME=@HUB_VARIABLE` on the forms): an allow-list the operator sets
(`TOOLSERVERS_ENV_REFERENCES`: names, or prefixes ending in `*`; default `HUB_TOOL_*`).

The list binds everyone who configures a server (staff, superusers, the operator at the
shell, who sets the list anyway), and it is read twice: when a server is saved, and when its
connection opens (`toolservers.runtime`), so narrowing the list stops references stored
before. The hub's own configuration is refused whatever the list says: every name the
settings read (`hermes_site.env.READ`) and the secrets named below.
"""

import re

from django.conf import settings

from hermes_site.env import READ

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Refused even if the settings never read them in this process (an optional part unused).
HUB_SECRETS = frozenset(
    {
        "SECRET_KEY",
        "DATABASE_URL",
        "REDIS_URL",
        "LLM_API_KEY",
        "TELEGRAM_BOT_TOKEN",
        "TELEGRAM_WEBHOOK_SECRET",
        "METRICS_TOKEN",
    }
)


def _listed(name: str) -> bool:
    for entry in settings.TOOLSERVERS_ENV_REFERENCES:
        entry = entry.strip()
        if entry.endswith("*") and name.startswith(entry[:-1]):
            return True
        if entry == name:
            return True
    return False


def reference_refusal(name: str) -> str:
    """Why `name` may not be given to a tool server, or "" when it may."""
    if not ENV_NAME.match(name):
        return f"{name!r} is not a variable name"
    if name in HUB_SECRETS or name in READ:
        return (
            f"the hub's own {name} is never given to a server (whatever "
            "TOOLSERVERS_ENV_REFERENCES allows)"
        )
    if not _listed(name):
        allowed = ", ".join(settings.TOOLSERVERS_ENV_REFERENCES) or "none"
        return (
            f"{name} is not allowed for tool servers (TOOLSERVERS_ENV_REFERENCES allows: "
            f"{allowed}; ask an operator)"
        )
    return ""
