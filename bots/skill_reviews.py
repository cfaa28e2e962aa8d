"""Skill proposals decided by Telegram inline buttons.

When the skills app announces a pending proposal (`skills.signals.proposal_created`), every
skill reviewer (`skills.policy.may_review`) with a linked Telegram account gets, in their
private chat, what would change and the compact diff against the version it is based on,
with Approve / Reject buttons. The source chat's title is shown only to a reviewer who may
read that chat. A press calls the one decision service (`skills.reviews.
skill_proposal_decide`) with the presser's linked person, bound to the version the message
showed; the service decides who is entitled. Callback data is
`skl:<proposal id>:<shown version or 0>:a|r` (at most 35 bytes of Telegram's 64): it names a
decision and a version, never a reviewer. Presses outside the reviewer's private chat decide
nothing.
"""

from __future__ import annotations

import html
import logging
import re
from typing import TYPE_CHECKING

from django.contrib.auth import get_user_model
from django.db import transaction

from bots.callbacks import callback_answer, callback_edit, in_own_private_chat
from bots.models import OutboundMessage
from bots.outbox import UpdateOutcome, outbox_send
from bots.telegram_format import TELEGRAM_LIMIT, utf16_len
from bots.updates import BotIdentity, display_name
from chats.models import Actor, Channel
from chats.selectors import chats_readable_by
from chats.services import actor_get_or_create
from hermes_site.scanning import reveal_hidden

if TYPE_CHECKING:  # python-telegram-bot loads only where Telegram is spoken
    from telegram import CallbackQuery

logger = logging.getLogger(__name__)

CALLBACK_RE = re.compile(r"^skl:(\d{1,18}):(\d{1,9}):([ar])$")
TAG = re.compile(r"<[^<>]*>")
ACTION_LABELS = {
    "create": "create a new skill",
    "edit": "rewrite",
    "patch": "patch",
    "write_file": "write a file of",
    "remove_file": "remove a file of",
    "delete": "archive",
}
REASON_CHARS = 600
NAME_CHARS = 80
LABEL_CHARS = 200  # who proposed: their identity, then the display name they gave (marked)
TITLE_CHARS = 120
CUT_NOTE = "The diff is cut to fit Telegram: the Approvals page of the dashboard shows all of it."
# Room kept free below Telegram's limit, so that an edit or a longer name never overflows.
MARGIN = 16
ICON = "🛠"


# --- the request --------------------------------------------------------------------------


def _keyboard(proposal_id: int, shown: int) -> dict:
    return {
        "inline_keyboard": [
            [
                {"text": "✅ Approve", "callback_data": f"skl:{proposal_id}:{shown}:a"},
                {"text": "✖️ Reject", "callback_data": f"skl:{proposal_id}:{shown}:r"},
            ]
        ]
    }


def _text(value: str, limit: int | None = None) -> str:
    """Untrusted text as Telegram HTML: hidden code points shown as markers, escaped, cut."""
    value = reveal_hidden(value or "")
    if limit is not None and len(value) > limit:
        value = value[: limit - 1].rstrip() + "…"
    return html.escape(value, quote=False)


def _plain(markup: str) -> str:
    """The text Telegram shows of our own HTML (simple tags, escaped text)."""
    return html.unescape(TAG.sub("", markup))


def _visible_len(markup: str) -> int:
    """What Telegram counts of our own HTML: the visible text, in UTF-16 code units."""
    return utf16_len(_plain(markup))


def _base_version(proposal):
    if proposal.base_number is None or proposal.skill_id is None:
        return None
    return proposal.skill.versions.filter(number=proposal.base_number).first()


def _headline(proposal) -> str:
    action = ACTION_LABELS.get(proposal.action, proposal.action)
    return f"{ICON} Skill change: <b>{html.escape(action)}</b> <code>{_text(proposal.slug)}</code>"


def _diff_text(proposal) -> str:
    """The compact diff against the base version, hidden code points revealed (not escaped)."""
    from skills.diff import content_diff_cached, unified_text

    if proposal.action == "delete":
        return ""
    base = _base_version(proposal)
    # The same cached diff as the Approvals page: computed once per content pair.
    diffs = content_diff_cached(before=base, after=proposal)
    # Enough of the text to fill a message even before markers make it longer.
    return reveal_hidden(unified_text(diffs, limit=2 * TELEGRAM_LIMIT))


def _cut(text: str, units: int) -> tuple[str, bool]:
    """`text` within `units` UTF-16 code units (the "…" line that marks a cut included), cut
    at a line end when one is near."""
    if utf16_len(text) <= units:
        return text, False
    out: list[str] = []
    used = 0
    for char in text:
        size = utf16_len(char)
        if used + size > units - 2:
            break
        out.append(char)
        used += size
    head = "".join(out)
    line_end = head.rfind("\n")
    if line_end > len(head) // 2:
        head = head[:line_end]
    return head.rstrip() + "\n…", True


def prompt_text(proposal, *, reviewer, diff: str | None = None) -> str:
    """The HTML of an approval request of `proposal` for `reviewer`: what would change, as the
    buttons below it decide it, within Telegram's 4,096 characters. `diff` is the proposal's
    `_diff_text` when the caller already has it (one diff for all reviewers)."""
    lines = [_headline(proposal)]
    if proposal.category:
        lines.append(f"Category: {_text(proposal.category, NAME_CHARS)}")
    by = f"Proposed by {_text(proposal.author_label, LABEL_CHARS)}"
    chat = proposal.source_chat
    if chat is not None and chat.title and chats_readable_by(reviewer).filter(pk=chat.pk).exists():
        by += f" in “{_text(chat.title, TITLE_CHARS)}”"
    origin = proposal.origin_label
    if proposal.author_actor_id or proposal.author_person_id or not origin:
        lines.append(by)  # nobody to name for the curator's own merges
    if origin:
        lines.append(origin[0].upper() + origin[1:])
    if proposal.reason.strip():
        lines.append(f"Why: <i>{_text(proposal.reason.strip(), REASON_CHARS)}</i>")
    if proposal.base_number is None:
        lines.append("A new skill.")
    else:
        lines.append(f"Based on version {proposal.base_number}.")
    head = "\n".join(lines)
    if proposal.action == "delete":
        return head + "\n\nApproving archives it: it leaves the skills index, its versions stay."
    tail = "Approve it to make it the skill's next version."
    diff = (_diff_text(proposal) if diff is None else diff) or "(no change in the text)"
    room = TELEGRAM_LIMIT - MARGIN - _visible_len(head) - utf16_len(tail) - 4
    shown, cut = _cut(diff, room)
    if cut:
        room -= utf16_len(CUT_NOTE) + 1
        shown, _ = _cut(diff, room)
        tail = f"{CUT_NOTE}\n{tail}"
    return f"{head}\n\n<pre>{html.escape(shown, quote=False)}</pre>\n{tail}"


def _recipients() -> list[Actor]:
    """Telegram accounts linked to an active person who may review skills."""
    from skills.policy import skill_reviewer_actors

    return skill_reviewer_actors(channel=Channel.TELEGRAM)


def skill_proposal_notify(*, proposal) -> list[OutboundMessage]:
    """Queue an Approve/Reject message to the private chat of every skill reviewer with a
    linked Telegram account; nothing for a proposal that is no longer pending."""
    from skills.models import SkillProposal

    proposal = (
        SkillProposal.objects.select_related(
            "skill", "author_actor", "author_person", "source_chat"
        )
        .filter(pk=proposal.pk, status=SkillProposal.Status.PENDING)
        .first()
    )
    if proposal is None:
        return []
    shown = proposal.base_number or 0
    diff = _diff_text(proposal)
    rows = []
    with transaction.atomic():
        for actor in _recipients():
            try:
                chat_id = int(actor.external_id)  # a user's private chat id is their user id
            except ValueError:
                continue
            if chat_id <= 0:
                continue
            rows.append(
                outbox_send(
                    telegram_chat_id=chat_id,
                    text=prompt_text(proposal, reviewer=actor.person, diff=diff),
                    reply_markup=_keyboard(proposal.pk, shown),
                    extra={"skill_proposal_id": proposal.pk, "skill_shown_version": shown},
                )
            )
    return rows


def on_proposal_created(sender=None, proposal=None, **kwargs) -> None:
    """Receiver of `skills.signals.proposal_created` (sent after commit)."""
    if proposal is None:
        return
    from django.conf import settings

    if not settings.TELEGRAM_BOT_TOKEN:
        return
    try:
        skill_proposal_notify(proposal=proposal)
    except Exception:  # noqa: BLE001 - a notification must never break the proposal
        logger.exception("could not queue Telegram review messages for skill proposal %s", proposal)


# --- a press ------------------------------------------------------------------------------


def _outcome_line(proposal, decision: str, presser_name: str) -> str:
    name = _text(proposal.slug)
    who = html.escape(presser_name, quote=False)
    if decision == "reject":
        if proposal.base_number is None:
            return f"✖️ Rejected by {who}: {name} was not created."
        return f"✖️ Rejected by {who}: {name} stays at version {proposal.base_number}."
    if proposal.action == "delete":
        return f"✅ Approved by {who}: {name} is archived."
    number = proposal.result_version.number if proposal.result_version else None
    if number is None:
        return f"✅ Approved by {who}."
    return f"✅ Approved by {who}: {name} is now at version {number}."


def _already_decided_line(proposal) -> str:
    from skills.models import SkillProposal

    name = _text(proposal.slug)
    if proposal.status == SkillProposal.Status.SUPERSEDED:
        current = proposal.skill.current_version if proposal.skill_id else None
        now = f" (it is at version {current.number} now)" if current else ""
        return f"⏭ Out of date: {name} changed since this was proposed{now}. Nothing was applied."
    if proposal.status == SkillProposal.Status.EXPIRED:
        return f"⌛ Expired: nobody decided this change of {name} in time. Nothing was applied."
    decided_by = proposal.decided_by.get_username() if proposal.decided_by else "someone"
    label = proposal.get_status_display().lower()
    return f"Already decided: {label} by {html.escape(decided_by, quote=False)}."


def callback_query_apply(query: CallbackQuery, identity: BotIdentity):
    """Apply a press of a skill button: a decision by the presser's linked person, bound to
    the version the message showed, or a polite no-op that changes nothing."""
    match = CALLBACK_RE.match(query.data or "")
    if match is None:
        return UpdateOutcome(
            "callback:unknown", outbound=[callback_answer(query, "This button is old.")]
        )
    if not in_own_private_chat(query):
        text = "Skill changes are decided in your private chat with me."
        return UpdateOutcome("skills:not private", outbound=[callback_answer(query, text)])
    try:
        from skills.models import SkillProposal, Via
        from skills.reviews import skill_proposal_decide
        from skills.services import SkillConflict, SkillInvalid, SkillNotAllowed, SkillStale
    except ImportError:
        return UpdateOutcome(
            "callback:no skills", outbound=[callback_answer(query, "Skills are off.")]
        )
    proposal_id, shown = int(match.group(1)), int(match.group(2))
    decision = "approve" if match.group(3) == "a" else "reject"
    presser = query.from_user
    actor = actor_get_or_create(
        channel=Channel.TELEGRAM, user_id=presser.id, display_name=display_name(presser)
    )
    # Read the person as stored now: a reviewer deactivated a moment ago decides nothing.
    person = get_user_model().objects.filter(pk=actor.person_id).first()
    if person is None:
        text = "Link this Telegram account to your dashboard login first (/link CODE)."
        return UpdateOutcome("skills:not linked", outbound=[callback_answer(query, text)])
    try:
        proposal = skill_proposal_decide(
            proposal_id=proposal_id,
            decision=decision,
            shown_version=shown or None,
            person=person,
            via=Via.TELEGRAM,
        )
    except SkillNotAllowed:
        text = "Only skill reviewers can decide skill changes."
        return UpdateOutcome("skills:not allowed", outbound=[callback_answer(query, text)])
    except (SkillStale, SkillConflict, SkillInvalid) as exc:
        current = (
            SkillProposal.objects.select_related("skill__current_version", "decided_by")
            .filter(pk=proposal_id)
            .first()
        )
        if current is None:
            return UpdateOutcome(
                "skills:unknown", outbound=[callback_answer(query, "This button is old.")]
            )
        if isinstance(exc, SkillInvalid):
            line = "🚫 Blocked by the content scan: the change is rejected, nothing changed."
            result = "skills:blocked"
        elif current.status == SkillProposal.Status.PENDING:
            # Data that names another version than the proposal's (forged or garbled): the
            # message may still carry the right buttons, so it stays as it is.
            answer = callback_answer(query, "This button is for another version of the change.")
            return UpdateOutcome("skills:stale", outbound=[answer])
        else:
            line = _already_decided_line(current)
            superseded = current.status == SkillProposal.Status.SUPERSEDED
            result = "skills:stale" if superseded else "skills:conflict"
        outbound = [callback_answer(query, _plain(line)[:190])]
        edit = f"{_headline(current)}\n{line}"
        return UpdateOutcome(result, outbound=outbound + callback_edit(query, edit))
    line = _outcome_line(proposal, decision, display_name(presser))
    verb = "Approved" if decision == "approve" else "Rejected"
    outbound = [callback_answer(query, f"{verb}.")]
    outbound += callback_edit(query, f"{_headline(proposal)}\n{line}")
    return UpdateOutcome(f"skills:{decision}", outbound=outbound)
