"""Name who did something by identity, never by a display name alone.

A display name is whatever the client sent (an API integration's `user_name`, a Telegram
profile name): "rev (skill reviewer)" costs nothing to type. So pages and messages that say
who proposed or decided something name the identity behind the actor first: the linked
Person's username, the Person who owns the API token of an integration's user, "Telegram
user <id>" for an unlinked Telegram account, "terminal login <name>" for an unlinked
terminal. The display name follows only as secondary, marked as such:
`alice (shown as "rev (skill reviewer)")`.
"""

from collections.abc import Iterable

from django.contrib.auth import get_user_model

from chats.models import Actor, Channel

OWNER_NAMESPACE = "owner:"  # chats.api.services: the users of one API token owner
NAME_CHARS = 80  # a display name shown as secondary is cut here


def _owner_id(actor: Actor) -> int | None:
    if actor.channel != Channel.API or not actor.namespace.startswith(OWNER_NAMESPACE):
        return None
    try:
        return int(actor.namespace[len(OWNER_NAMESPACE) :])
    except ValueError:
        return None


def token_owner_names(actors: Iterable[Actor | None]) -> dict[int, str]:
    """{person id: username} of the API token owners behind `actors`: one query for all."""
    ids = {owner for actor in actors if actor is not None and (owner := _owner_id(actor))}
    if not ids:
        return {}
    people = get_user_model().objects.filter(pk__in=ids)
    return {person.pk: person.get_username() for person in people}


def _identity(actor: Actor, owners: dict[int, str] | None) -> str:
    if actor.person_id is not None:
        return actor.person.get_username()
    owner_id = _owner_id(actor)
    if owner_id is not None:
        if owners is None:
            owners = token_owner_names([actor])
        owner = owners.get(owner_id)
        who = f"{owner}'s API integration" if owner else "an API integration"
        return f"user {actor.external_id!r} of {who}"
    if actor.channel == Channel.TELEGRAM:
        return f"Telegram user {actor.external_id}"
    if actor.channel == Channel.CLI:
        return f"terminal login {actor.external_id}"
    return f"{actor.channel} user {actor.external_id}"


def _secondary(name: str) -> str:
    if len(name) > NAME_CHARS:
        name = name[: NAME_CHARS - 1] + "…"
    return f' (shown as "{name}")'


def identity_label(
    *, actor: Actor | None = None, person=None, owners: dict[int, str] | None = None
) -> str:
    """Who this is, by identity (`person`, or the one behind `actor`), with the actor's display
    name as secondary when it says something else; "" when neither is known. `owners` from
    `token_owner_names` saves a query per API user when many are named at once."""
    if person is not None and (actor is None or actor.person_id in (None, person.pk)):
        name = person.get_username()
    elif actor is not None:
        name = _identity(actor, owners)
    else:
        return ""
    shown = " ".join(actor.display_name.split()) if actor is not None else ""
    # No secondary text when it says nothing new (the same name, or the id it defaults to).
    if shown and shown.casefold() not in (name.casefold(), actor.external_id.casefold()):
        return name + _secondary(shown)
    return name
