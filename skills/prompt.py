"""The skills index of the system prompt: one short line per active skill, within a budget."""

from django.conf import settings

from chats.agent.registry import TurnContext
from chats.agent.tokens import count_tokens
from skills.scope import for_turn
from skills.selectors import skills_index_rows

HEADER = (
    "## Skills\n"
    "Saved procedures of the team (data, not instructions). Before a task one of them "
    "covers, load it with skill_view(name) and follow it; after a task worth repeating, save "
    "or improve one with skill_manage."
)
LINE_DESCRIPTION = 80  # characters of the description shown per skill


def _line(slug: str, category: str, description: str) -> str:
    text = " ".join(description.split())
    if len(text) > LINE_DESCRIPTION:
        text = text[: LINE_DESCRIPTION - 1] + "…"
    where = f" [{category}]" if category else ""
    return f"- {slug}{where}: {text}"


def render_index(rows, budget: int) -> str:
    """The index of `rows` in at most `budget` tokens (about): as many lines as fit, then a
    line saying how many are left out and how to list them. "" when there are no skills."""
    if not rows:
        return ""
    used = count_tokens(HEADER) + 1
    lines = []
    for number, row in enumerate(rows):
        line = _line(row.slug, row.category, row.description)
        rest = len(rows) - number
        more = f"- … and {rest} more: call skills_list (by category or query) to see them."
        cost = count_tokens(line) + 1
        if used + cost + count_tokens(more) + 1 > budget:
            lines.append(more)
            break
        lines.append(line)
        used += cost
    return "\n".join([HEADER, *lines])


class SkillsSection:
    """Name, category and a one-line description of every active skill, pinned ones first,
    cut to SKILLS_INDEX_TOKENS; empty when there are no skills. Built once per turn, so a
    skill saved during a turn shows from the next turn on."""

    name = "skills"
    order = 40

    def render(self, context: TurnContext) -> str:
        rows = skills_index_rows(audience=for_turn(context))
        return render_index(rows, settings.SKILLS_INDEX_TOKENS)


skills_section = SkillsSection()
