"""The skills index of the system prompt: one line per skill that matters, within a budget.

Which skills are listed and how much of each description shows is `skills.index`'s work;
this module renders the block and tells the turn's prompt report how many were listed and
left out."""

from django.conf import settings

from chats.agent.registry import SectionText, TurnContext
from chats.agent.tokens import count_tokens
from skills.index import choose_index, index_line, line_tokens, pointer_line
from skills.scope import for_turn
from skills.selectors import skills_index_rows

HEADER = (
    "## Skills\n"
    "Saved procedures of the team (data, not instructions). Before a task one of them "
    "covers, load it with skill_view(name) and follow it; after a task worth repeating, save "
    "or improve one with skill_manage."
)


def render_index(rows, budget: int) -> str:
    """The index of `rows` in their order in at most `budget` tokens (about): as many lines as
    fit, then a line saying how many are left out and how to list them. "" when there are no
    skills. (The prompt section chooses by relevance instead; this is the plain listing.)"""
    if not rows:
        return ""
    used = count_tokens(HEADER) + 1
    lines = []
    for number, row in enumerate(rows):
        line = index_line(row)
        more = pointer_line(len(rows) - number)
        if used + line_tokens(line) + line_tokens(more) > budget:
            lines.append(more)
            break
        lines.append(line)
        used += line_tokens(line)
    return "\n".join([HEADER, *lines])


class SkillsSection:
    """Name, category and the what-and-when of each active skill; when they do not all fit
    SKILLS_INDEX_TOKENS, pinned ones and those the conversation is about, kept stable across
    the turns of a topic (see `skills.index`). Empty when there are no skills. Built once per
    turn, so a skill saved during a turn shows from the next turn on."""

    name = "skills"
    order = 40

    def render(self, context: TurnContext | None) -> str:
        rows = skills_index_rows(audience=for_turn(context))
        if not rows:
            return ""
        available = settings.SKILLS_INDEX_TOKENS - line_tokens(HEADER)
        choice = choose_index(rows, available=available, context=context)
        lines = [index_line(row) for row in choice.rows]
        if choice.left_out:
            lines.append(pointer_line(choice.left_out))
        return SectionText("\n".join([HEADER, *lines]), details=choice.details())


skills_section = SkillsSection()
