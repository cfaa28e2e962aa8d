"""`/skills` on every conversational channel: the skills the agent knows in this chat, as its
prompt index lists them (active and stale, pinned first; a stale one is marked "(stale)", as
the dashboard labels it): team skills, and the asker's personal skills only in their own
private chat (`skills.scope.in_chat`), marked as such. Anyone who may talk to the agent may
list them; proposals and archived skills are never listed here."""

from chats.slash_commands import CommandContext, SlashCommand
from skills.scope import for_turn
from skills.selectors import skills_index_rows

MAX_LINES = 50
DESCRIPTION_CHARS = 80


def _line(row) -> str:
    description = " ".join(row.description.split())
    if len(description) > DESCRIPTION_CHARS:
        description = description[: DESCRIPTION_CHARS - 1].rstrip() + "…"
    category = f" [{row.category}]" if row.category else ""
    pin = " (pinned)" if row.pinned else ""
    mine = " (personal)" if row.personal else ""
    stale = " (stale)" if row.stale else ""  # as the dashboard's library labels it
    return f"• {row.slug}{category}{pin}{mine}{stale}: {description}"


def skills_command(context: CommandContext) -> str:
    """The index as plain text; `/skills word` keeps the skills whose name, category or
    description contains the word."""
    rows = skills_index_rows(audience=for_turn(context))
    query = context.args.strip().lower()
    if query:
        rows = [
            row
            for row in rows
            if query in row.slug
            or query in row.category.lower()
            or query in row.description.lower()
        ]
    if not rows:
        return f"No skill matches “{context.args.strip()}”." if query else "I know no skills yet."
    lines = [_line(row) for row in rows[:MAX_LINES]]
    if len(rows) > MAX_LINES:
        lines.append(f"… and {len(rows) - MAX_LINES} more: /skills <word> narrows the list.")
    return f"Skills I know ({len(rows)}):\n" + "\n".join(lines)


skills_slash_command = SlashCommand(
    name="skills", help="The skills I know (/skills word to filter)", handler=skills_command
)
