"""What messages carry to the model besides their text (their files), added to a request.

The context builder selects the window first; then, once per request, every message parts
provider (`registry.message_parts_register`) is asked about the messages of the window that
name it in their metadata (`CARRIES_KEY`), in one call: a chat whose messages carry nothing
costs a look at each selected row's metadata and no query. What a provider gives becomes
content parts after the message's text (`_Item.carry`): its text as a text part, its images
as image parts whose cost the provider states. The window guard (`_enforce`) runs after, so
what the files take comes out of the history.
"""

import logging
from collections.abc import Iterable

from chats.agent.convert import StoredMessage
from chats.agent.counting import _Item, image_part
from chats.agent.registry import CARRIES_KEY, Carried, CarryRequest, TurnContext, registry

logger = logging.getLogger(__name__)


def _names(metadata) -> tuple[str, ...]:
    names = metadata.get(CARRIES_KEY) if isinstance(metadata, dict) else None
    if not names:
        return ()
    return tuple(names) if isinstance(names, list | tuple) else (str(names),)


def carry_parts(
    *,
    trigger,
    trigger_item: _Item,
    trigger_cap: int,
    history: Iterable[tuple[object, list[_Item]]],
    history_cap: int,
    provider_info,
    turn_context: TurnContext,
) -> dict | None:
    """Add what the trigger and the selected history (`(unit, items)` pairs) carry to their
    items, the trigger's within `trigger_cap` tokens, each history message's within
    `history_cap`. Returns the providers' reports by message id, or None when nothing in
    the window carries anything (the usual case, answered without a query)."""
    if not registry.message_parts:
        return None
    wanted: dict[str, dict[int, int]] = {}
    items: dict[int, _Item] = {}
    for name in _names(trigger.metadata):
        wanted.setdefault(name, {})[trigger.pk] = trigger_cap
        items[trigger.pk] = trigger_item
    for unit, unit_items in history:
        # A unit of one message is the message itself (chats.agent.context builds no wrapper).
        for row in (unit,) if type(unit) is StoredMessage else unit.rows:
            names = _names(row.metadata) if row.metadata else ()
            if not names:
                continue
            item = next((item for item in unit_items if item.source_id == row.id), None)
            if item is None:  # a tool group flattened into one text: its files stay out
                continue
            for name in names:
                wanted.setdefault(name, {})[row.id] = history_cap
            items[row.id] = item
    if not wanted:
        return None
    reports: dict[str, object] = {}
    for name, caps in wanted.items():
        provider = registry.message_parts.get(name)
        if provider is None:
            continue
        request = CarryRequest(
            caps=caps,
            trigger_id=trigger.pk,
            provider_info=provider_info,
            turn_context=turn_context,
        )
        try:
            carried = provider(request)
        except Exception:  # noqa: BLE001 - one app's failure must not stop the turn
            logger.exception("message parts provider %r failed", name)
            continue
        for message_id, value in carried.items():
            item = items.get(message_id)
            if item is None or not isinstance(value, Carried):
                continue
            parts = [{"type": "text", "text": value.text}] if value.text else []
            parts += [image_part(image.url, image.tokens) for image in value.images]
            item.carry(parts)
            if value.report is not None:
                reports[str(message_id)] = value.report  # JSON keys, as stored
    return reports or None
