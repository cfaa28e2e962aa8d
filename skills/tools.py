"""The skills tools: `skills_list`, `skill_view` (progressive disclosure) and `skill_manage`."""

from chats.agent.registry import Tool, TurnContext
from skills.format import FILE_DIRS, SKILL_FILE, SkillFormatError, normalise_path
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

LIST_PAGE = 100
SHORT_DESCRIPTION = 120

LIST_DESCRIPTION = (
    "List the team's skills (saved procedures): name, category and a short description. "
    "The system prompt's index may show only some of them; use this to see the rest, "
    "filtered by `category` or a `query` in names and descriptions."
)
VIEW_DESCRIPTION = (
    "Load a skill before doing a task it covers: returns its SKILL.md (instructions) and "
    "the list of its supporting files. With `path` (e.g. references/api.md), returns that "
    "file instead. The result says the skill's version: pass it as `base_version` to "
    "skill_manage so a change made meanwhile by someone else is not overwritten."
)
MANAGE_DESCRIPTION = (
    "Create or change a skill: a reusable procedure for the whole team (a SKILL.md with YAML "
    "front matter `name` (= the skill's name, a slug), `description` (one line: what and "
    "when), then a Markdown body). Save one after a task that took several tries or that "
    "someone will ask for again. Actions: create (name, content, optional category), patch "
    "(old_string → new_string in SKILL.md, or in file_path; tolerant of indentation, "
    "whitespace and quote differences; replace_all for several matches), edit (whole new "
    "content), delete (archives; a reviewer can restore), write_file / remove_file "
    f"(file_path under {', '.join(d + '/' for d in FILE_DIRS)}; file_content is text). "
    "Changes asked for in a shared chat wait for a skill reviewer; the result says which. "
    "Never put secrets in a skill."
)

LIST_PARAMETERS = {
    "type": "object",
    "properties": {
        "category": {"type": "string", "maxLength": 64},
        "query": {"type": "string", "maxLength": 200},
        "offset": {"type": "integer", "minimum": 0},
    },
    "additionalProperties": False,
}
VIEW_PARAMETERS = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 200},
        "path": {"type": "string", "maxLength": 300, "description": "A supporting file."},
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
        "name": {"type": "string", "maxLength": 200, "description": "The skill's slug."},
        "content": {"type": "string", "description": "create / edit: the whole SKILL.md."},
        "category": {"type": "string", "maxLength": 64, "description": "create: a slug."},
        "old_string": {"type": "string", "description": "patch: the text to replace."},
        "new_string": {"type": "string", "description": "patch: its replacement."},
        "replace_all": {"type": "boolean"},
        "file_path": {"type": "string", "maxLength": 300},
        "file_content": {"type": "string"},
        "base_version": {
            "type": "integer",
            "minimum": 1,
            "description": "The version you viewed; the change is refused if it moved on.",
        },
        "reason": {"type": "string", "maxLength": 500, "description": "Why (for the log)."},
    },
    "required": ["action", "name"],
    "additionalProperties": False,
}


def _short(text: str, limit: int = SHORT_DESCRIPTION) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _list(context: TurnContext, arguments: dict) -> str:
    offset = arguments.get("offset") or 0
    skills = skills_listing(
        category=arguments.get("category") or "", query=arguments.get("query") or ""
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
    skill = skill_get(name)
    if skill is None:
        return f"Error: there is no active skill named {name!r}. Call skills_list to see the names."
    version = skill.current_version
    path = (arguments.get("path") or "").strip()
    if path and path != SKILL_FILE:
        try:
            path = normalise_path(path)
        except SkillFormatError as exc:
            return f"Error: {exc}"
        if path not in version.files:
            listed = ", ".join(sorted(version.files)) or "none"
            return f"Error: {skill.slug} has no file {path!r}. Its files: {listed}."
        skill_usage_record(
            skill=skill,
            version=version,
            path=path,
            chat=context.chat,
            turn=context.turn,
            actor=context.actor,
        )
        return f"{skill.slug}/{path} (version {version.number}):\n\n{version.files[path]}"
    skill_usage_record(
        skill=skill, version=version, chat=context.chat, turn=context.turn, actor=context.actor
    )
    category = f", category {skill.category}" if skill.category else ""
    parts = [f"Skill {skill.slug} (version {version.number}{category}):", "", version.skill_md]
    if version.files:
        parts += ["", "Supporting files (load one with skill_view(name, path)):"]
        parts += [
            f"- {file_path} ({len(text.encode('utf-8')):,} bytes)"
            for file_path, text in version.files.items()
        ]
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
    )
    name = arguments["name"].strip()
    base = arguments.get("base_version")
    if action == "create":
        outcome = skill_create(
            name=name,
            content=arguments["content"],
            category=arguments.get("category") or "",
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
