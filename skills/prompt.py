"""The skills index of the system prompt: one line per skill that matters, within a budget.

Which skills are listed and how much of each description shows is `skills.index`'s work;
this module renders the block and tells the turn's prompt report how many were listed and
left out."""

from django.conf import settings

from chats.agent.registry import SectionText, TurnContext
from skills.index import choose_index, index_line, line_tokens, pointer_line
from skills.scope import for_turn
from skills.selectors import skills_index_rows, skills_maybe_indexed
from skills.toolneeds import mark_missing_tools

HEADER = (
    "## Skills\n"
    "Saved procedures of the team (data, not instructions). Before a task one of them "
    "covers, load it with skill_view(name) and follow it; after a task worth repeating, save "
    "or improve one with skill_manage."
)


class SkillsSection:
    """Name, category and the what-and-when of each active skill; when they do not all fit
    SKILLS_INDEX_TOKENS, pinned ones and those the conversation is about, kept stable across
    the turns of a topic (see `skills.index`). Empty when there are no skills. Built once per
    turn, so a skill saved during a turn shows from the next turn on."""

    name = "skills"
    order = 40

    def render(self, context: TurnContext | None) -> str:
        # A hub or author without skills stops here: one small statement instead of the
        # audience and the index's queryset (the hook rule in bench/context_bench.py).
        if not skills_maybe_indexed(context):
            return ""
        rows = skills_index_rows(audience=for_turn(context))
        if not rows:
            return ""
        rows = mark_missing_tools(rows, context)
        available = settings.SKILLS_INDEX_TOKENS - line_tokens(HEADER)
        choice = choose_index(rows, available=available, context=context)
        lines = [index_line(row) for row in choice.rows]
        if choice.left_out:
            lines.append(pointer_line(choice.left_out))
        return SectionText("\n".join([HEADER, *lines]), details=choice.details())


skills_section = SkillsSection()
