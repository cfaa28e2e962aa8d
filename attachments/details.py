"""What other apps know about a file, shown beside it, through a registry: a transcript's
language and duration (voice), without attachments naming the app that knows.

An app registers `(name, provider)` in its `AppConfig.ready()`; `provider(attachments)` gets
one page's attachments (any kinds, already read by the caller's audience rule) and returns
`{attachment pk: dict}` for those it knows, in one query. The dict appears in the HTTP API's
attachment JSON under `name` and is handed to the dashboard's card as `details[name]`. A
failing provider is logged and left out: a page never breaks for a detail.
"""

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from attachments.models import Attachment

logger = logging.getLogger(__name__)

Provider = Callable[[Sequence["Attachment"]], dict[int, dict]]
_providers: dict[str, Provider] = {}


def register_attachment_details(name: str, provider: Provider) -> None:
    """Show `provider`'s details of files under `name` (the same name again replaces it)."""
    _providers[name] = provider


def unregister_attachment_details(name: str) -> None:
    _providers.pop(name, None)


def attachment_details(attachments: Sequence["Attachment"]) -> dict[int, dict[str, dict]]:
    """`{attachment pk: {name: dict}}` from every provider, for the files they know."""
    found: dict[int, dict[str, dict]] = {}
    if not attachments or not _providers:
        return found
    for name, provider in list(_providers.items()):
        try:
            answers = provider(attachments)
        except Exception:  # noqa: BLE001 - a detail is never worth a broken page
            logger.exception("attachment details provider %r failed", name)
            continue
        for pk, detail in (answers or {}).items():
            found.setdefault(pk, {})[name] = detail
    return found
