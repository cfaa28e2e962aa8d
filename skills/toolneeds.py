"""The tools a skill names, checked against what a chat has on (`toolservers.availability`).

A skill names the tools it needs in its front matter (`metadata.hermes.requires_tools`,
`requires_toolsets`; see `skills.format.required_tools`), copied to `Skill.required_tools`.
The prompt index marks a skill whose tools are not all available in the chat, and
`skill_view` says, tool by tool, what the chat has on. Both check only skills that name
tools: a chat whose skills name none costs nothing more.
"""

import dataclasses

from chats.agent.registry import ORIGIN_CHAT, TurnContext
from skills.selectors import IndexRow
from toolservers.availability import ToolAvailability, available_names, tool_availability


def _for_turn(context: TurnContext | None) -> bool:
    """Only a turn answering people has the chat's tools (reviews and the curator never)."""
    return context is not None and context.chat is not None and context.origin == ORIGIN_CHAT


def mark_missing_tools(rows: list[IndexRow], context: TurnContext | None) -> list[IndexRow]:
    """`rows` with `tools_missing` set on those whose named tools are not all available in
    the turn's chat; one availability check for all of them, none when no row names tools."""
    needing = [row for row in rows if row.required_tools]
    if not needing or not _for_turn(context):
        return rows
    tools = [name for row in needing for name in row.required_tools.get("tools", ())]
    toolsets = [name for row in needing for name in row.required_tools.get("toolsets", ())]
    available = available_names(context.chat, tools=tools, toolsets=toolsets)

    def missing(row: IndexRow) -> bool:
        needs = row.required_tools
        if not needs:
            return False
        return any(("tool", name) not in available for name in needs.get("tools", ())) or any(
            ("toolset", name) not in available for name in needs.get("toolsets", ())
        )

    return [dataclasses.replace(row, tools_missing=True) if missing(row) else row for row in rows]


def describe(answers: list[ToolAvailability]) -> str:
    """One line per named tool with its state, for the model."""
    lines = []
    for item in answers:
        kind = "tool server" if item.kind == "toolset" else "tool"
        lines.append(f"- {kind} {item.name}: {item.label}")
    return "\n".join(lines)


def view_note(required: dict | None, context: TurnContext | None) -> str:
    """What `skill_view` says about the tools the skill names: each with its state in this
    chat, and what to do when some are not available ("" when it names none)."""
    if not required:
        return ""
    if not _for_turn(context):
        names = [*required.get("tools", ()), *required.get("toolsets", ())]
        return "Tools this skill names: " + ", ".join(names) + "."
    answers = tool_availability(
        context.chat, tools=required.get("tools", ()), toolsets=required.get("toolsets", ())
    )
    text = "Tools this skill names, in this chat:\n" + describe(answers)
    if any(item.state == "ask" for item in answers):
        text += (
            "\nA call to a tool that needs approval waits until a decider of this chat "
            "approves or declines it (the people here see a card); if it is declined or "
            "nobody decides in time, you are told and it did not run."
        )
    if not all(item.available for item in answers):
        text += (
            "\nSome are not available here: do not pretend to run those steps. Tell the user "
            "which tools are missing; a decider of this chat (its owner or an admin, or "
            "staff) can turn a hub's tool on here with /tools or on the chat's Tools page."
        )
    return text
