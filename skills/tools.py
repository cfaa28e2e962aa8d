"""The skills tools: `skills_list`, `skill_view` (progressive disclosure) and `skill_manage`.

What they list and load is what the chat may see (`skills.scope.in_chat`): team skills, and
the author's personal skills only in the author's own private chat. Elsewhere a personal
skill answers as a name nobody uses.
"""

from chats.agent.registry import ORIGIN_REVIEW, Tool, TurnContext
from chats.work_sources import work_sources
from skills.blobs import blob_sizes
from skills.format import SKILL_FILE, SkillFormatError, normalise_path
from skills.scope import for_turn
from skills.selectors import skill_get, skills_listing
from skills.services import (
    Author,
    skill_create,
    skill_delete,
    skill_edit,
    skill_file_remove,
    skill_file_write,
    skill_patch,
    skill_usage_record,
)
from skills.toolneeds import view_note

LIST_PAGE = 100
SHORT_DESCRIPTION = 120

LIST_DESCRIPTION = (
    "List the skills (saved procedures) of this chat: name, category, short description; "
    "personal ones are marked. Filter by category or a query; use it when the prompt's "
    "skills index is cut."
)
VIEW_DESCRIPTION = (
    "Load a skill (its SKILL.md and the list of its files) before a task it covers; with "
    "path, one of its files. Says the version to pass as base_version to skill_manage."
)
MANAGE_DESCRIPTION = (
    "Save or change a skill after a task worth repeating. SKILL.md: YAML front matter "
    "(name = the slug, description = one line), then a Markdown body. Actions: create "
    "(content, category, scope), patch (old_string, new_string; in file_path if given; "
    "replace_all for several matches), edit (content), delete (archives), "
    "write_file/remove_file (file_path: a text file in the skill, e.g. references/api.md). In "
    "a person's own private chat a create is their personal skill at once (scope='team' "
    "proposes it to the team); team skills and shared chats: a reviewer approves first. "
    "No secrets."
)

LIST_PARAMETERS = {
    "type": "object",
    "properties": {
        "category": {"type": "string"},
        "query": {"type": "string"},
        "offset": {"type": "integer"},
    },
    "additionalProperties": False,
}
VIEW_PARAMETERS = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "path": {"type": "string"},
    },
    "required": ["name"],
    "additionalProperties": False,
}
MANAGE_PARAMETERS = {
    "type": "object",
    "properties": {
        "action": {
            "type": "string",
            "enum": ["create", "patch", "edit", "delete", "write_file", "remove_file"],
        },
        "name": {"type": "string"},
        "content": {"type": "string"},
        "category": {"type": "string"},
        "scope": {"type": "string", "enum": ["personal", "team"]},
        "old_string": {"type": "string"},
        "new_string": {"type": "string"},
        "replace_all": {"type": "boolean"},
        "file_path": {"type": "string"},
        "file_content": {"type": "string"},
        "base_version": {"type": "integer"},
        "reason": {"type": "string"},
    },
    "required": ["action", "name"],
    "additionalProperties": False,
}


def _short(text: str, limit: int = SHORT_DESCRIPTION) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _list(context: TurnContext, arguments: dict) -> str:
    offset = max(0, arguments.get("offset") or 0)
    skills = skills_listing(
        category=arguments.get("category") or "",
        query=arguments.get("query") or "",
        audience=for_turn(context),
    )
    total = skills.count()
    if not total:
        return (
            "No skills match."
            if arguments.get("category") or arguments.get("query")
            else (
                "No skills yet. Create one with skill_manage(action='create') after a task worth "
                "repeating."
            )
        )
    page = list(skills[offset : offset + LIST_PAGE])
    lines = [
        f"- {skill.slug}"
        + (f" [{skill.category}]" if skill.category else "")
        + (" (personal)" if skill.scope == "personal" else "")
        + f": {_short(skill.description)}"
        for skill in page
    ]
    shown_to = offset + len(page)
    header = f"{total} skill{'s' if total != 1 else ''}; showing {offset + 1}–{shown_to}."
    if shown_to < total:
        header += f" Call again with offset={shown_to} for more."
    return "\n".join([header, *lines])


def _view(context: TurnContext, arguments: dict) -> str:
    name = arguments["name"].strip()
    skill = skill_get(name, audience=for_turn(context))
    if skill is None:
        return f"Error: there is no active skill named {name!r}. Call skills_list to see the names."
    version = skill.current_version
    path = (arguments.get("path") or "").strip()
    if path and path != SKILL_FILE:
        try:
            path = normalise_path(path)
        except SkillFormatError as exc:
            return f"Error: {exc}"
        if path in version.binaries:
            return (
                f"Error: {path} is a binary file of {skill.slug}; it is not shown here (people "
                "download it from the skill's page)."
            )
        if path not in version.files:
            listed = ", ".join(sorted([*version.files, *version.binaries])) or "none"
            return f"Error: {skill.slug} has no file {path!r}. Its files: {listed}."
        if context.origin != ORIGIN_REVIEW:  # a review reading a skill is not a use of it
            skill_usage_record(
                skill=skill,
                version=version,
                path=path,
                chat=context.chat,
                turn=context.turn,
                actor=context.actor,
            )
        return f"{skill.slug}/{path} (version {version.number}):\n\n{version.files[path]}"
    if context.origin != ORIGIN_REVIEW:
        skill_usage_record(
            skill=skill, version=version, chat=context.chat, turn=context.turn, actor=context.actor
        )
    category = f", category {skill.category}" if skill.category else ""
    if skill.scope == "personal":
        category += ", personal: only in its owner's own private chats"
    parts = [f"Skill {skill.slug} (version {version.number}{category}):", "", version.skill_md]
    if version.files or version.binaries:
        parts += ["", "Supporting files (load a text one with skill_view(name, path)):"]
        listed = {
            file_path: f"- {file_path} ({len(text.encode('utf-8')):,} bytes)"
            for file_path, text in version.files.items()
        }
        stored = blob_sizes(version.binaries.values())
        for file_path, sha in version.binaries.items():
            size, kind = stored.get(sha, (0, ""))
            listed[file_path] = f"- {file_path} (binary, {kind or 'unknown type'}, {size:,} bytes)"
        parts += [listed[file_path] for file_path in sorted(listed)]
    note = view_note(skill.required_tools, context)
    if note:
        parts += ["", note]
    return "\n".join(parts)


REQUIRED = {
    "create": ("content",),
    "edit": ("content",),
    "patch": ("old_string", "new_string"),
    "write_file": ("file_path", "file_content"),
    "remove_file": ("file_path",),
    "delete": (),
}


def _manage(context: TurnContext, arguments: dict) -> str:
    action = arguments["action"]
    missing = [key for key in REQUIRED[action] if arguments.get(key) is None]
    if missing:
        return f"Error: action {action} needs {', '.join(missing)}."
    author = Author(
        actor=context.actor,
        person=context.person,
        chat=context.chat,
        turn=context.turn,
        reason=arguments.get("reason") or "",
        origin=context.origin,
        review_id=context.review_id,
        sources=tuple(work_sources(context)),
    )
    name = arguments["name"].strip()
    base = arguments.get("base_version")
    if action == "create":
        outcome = skill_create(
            name=name,
            content=arguments["content"],
            category=arguments.get("category") or "",
            scope=arguments.get("scope") or "",
            author=author,
        )
    elif action == "edit":
        outcome = skill_edit(
            name=name, content=arguments["content"], author=author, base_version=base
        )
    elif action == "patch":
        outcome = skill_patch(
            name=name,
            old_string=arguments["old_string"],
            new_string=arguments["new_string"],
            replace_all=bool(arguments.get("replace_all")),
            file_path=arguments.get("file_path") or "",
            author=author,
            base_version=base,
        )
    elif action == "write_file":
        outcome = skill_file_write(
            name=name,
            file_path=arguments["file_path"],
            file_content=arguments["file_content"],
            author=author,
            base_version=base,
        )
    elif action == "remove_file":
        outcome = skill_file_remove(
            name=name, file_path=arguments["file_path"], author=author, base_version=base
        )
    else:
        outcome = skill_delete(name=name, author=author, base_version=base)
    return outcome.message


SKILLS_LIST_TOOL = Tool(
    name="skills_list", description=LIST_DESCRIPTION, parameters=LIST_PARAMETERS, handler=_list
)
SKILL_VIEW_TOOL = Tool(
    name="skill_view", description=VIEW_DESCRIPTION, parameters=VIEW_PARAMETERS, handler=_view
)
SKILL_MANAGE_TOOL = Tool(
    name="skill_manage",
    description=MANAGE_DESCRIPTION,
    parameters=MANAGE_PARAMETERS,
    handler=_manage,
    timeout_seconds=30,
)


class SkillTools:
    """The skills app's tool provider."""

    def tools(self):
        return [SKILLS_LIST_TOOL, SKILL_VIEW_TOOL, SKILL_MANAGE_TOOL]


skill_tools = SkillTools()
