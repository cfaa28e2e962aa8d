"""The SKILL.md format (Agent Skills layout, as Hermes, Claude Code and Codex share it).

A skill is a SKILL.md: YAML front matter between `---` lines, then a Markdown body, plus
the supporting files of its folder at any depth (by convention under `references/`,
`templates/`, `scripts/`, `assets/`, but `reference.md`, `examples/` or `LICENSE.txt` count
too): text, or binary (fonts, PDFs) within the limits below.
Front matter is parsed with PyYAML's safe loader only (no Python objects), and aliases are
refused outright (no "billion laughs" expansion). Every error message says what to change.
"""

import hashlib
import json
import re
import unicodedata
from dataclasses import dataclass
from datetime import date, datetime

import yaml

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
NAME_MAX = 64
DESCRIPTION_MAX = 1024
BODY_MAX = 100_000
FRONT_MATTER_MAX = 16_384  # characters of YAML between the `---` lines
FILE_MAX_BYTES = 1024 * 1024  # one text file
BINARY_MAX_BYTES = 16 * 1024 * 1024  # one binary file
TEXT_TOTAL_MAX_BYTES = 8 * 1024 * 1024  # all text files of a skill (copied into each version)
SKILL_MAX_BYTES = 64 * 1024 * 1024  # all files of a skill, text and binary
MAX_FILES = 256  # text and binary files of a skill
PATH_MAX = 255
SEGMENT_MAX = 100
CATEGORY_MAX = 255
CATEGORY_DEPTH_MAX = 8
FILE_DIRS = ("references", "templates", "scripts", "assets")  # the convention, not a rule
LIST_MAX = 32  # tags, related skills, tools a skill requires
# A tool a skill names (`metadata.hermes.requires_tools`): a function name as the model
# sees it, `<server>__<tool>` for a tool server's tool, or a built-in tool's name.
TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
REQUIREMENT_KEYS = ("requires_tools", "requires_toolsets")
SKILL_FILE = "SKILL.md"
# Escapes of a double-quoted YAML value: a backslash and the character after it (a line
# break too). Those that decode to themselves are allowed (see _refuse_escapes).
ESCAPE_RE = re.compile(r"\\(?:.|\n)", re.DOTALL)
ESCAPE_WIDTH = {"x": 4, "u": 6, "U": 10}
VISIBLE_ESCAPES = frozenset({"\\\\", '\\"', "\\/", "\\ ", "\\t", "\\n"})


class SkillFormatError(ValueError):
    """The content breaks the format; the message tells the model what to fix."""


@dataclass(frozen=True)
class ParsedSkill:
    front_matter: dict
    body: str

    @property
    def name(self) -> str:
        return self.front_matter["name"]

    @property
    def description(self) -> str:
        return self.front_matter["description"]


def check_name(name, *, what: str = "name") -> str:
    """A valid slug, or SkillFormatError saying why not."""
    if not isinstance(name, str) or not name:
        raise SkillFormatError(f"`{what}` is missing: give a slug like `deploy-staging`.")
    if len(name) > NAME_MAX:
        raise SkillFormatError(
            f"`{what}` {name[:20]!r}… has {len(name)} characters; at most {NAME_MAX} are allowed."
        )
    if not NAME_RE.match(name):
        raise SkillFormatError(
            f"`{what}` {name!r} is not a valid slug: use lowercase letters, digits, '.', '_' "
            "and '-', starting with a letter or digit (e.g. `deploy-staging`)."
        )
    return name


def check_category(category) -> str:
    """ "" (no category) or a path of slugs joined by '/' (`mlops/inference`), at most
    CATEGORY_DEPTH_MAX deep and CATEGORY_MAX characters long."""
    if category in (None, ""):
        return ""
    if not isinstance(category, str):
        raise SkillFormatError("`category` must be text, like `ops` or `mlops/inference`.")
    if len(category) > CATEGORY_MAX:
        raise SkillFormatError(
            f"`category` has {len(category)} characters; at most {CATEGORY_MAX} are allowed."
        )
    segments = category.split("/")
    if len(segments) > CATEGORY_DEPTH_MAX:
        raise SkillFormatError(
            f"`category` {category[:40]!r} has {len(segments)} levels; at most "
            f"{CATEGORY_DEPTH_MAX} are allowed."
        )
    for segment in segments:
        if not segment:
            raise SkillFormatError(
                f"`category` {category!r} has an empty level: write slugs joined by single "
                "'/' (e.g. `mlops/inference`)."
            )
        check_name(segment, what="category")
    return category


def _refuse_aliases(text: str) -> None:
    """Anchors and aliases (expansion bombs) and hiding escapes are refused, in one pass over
    the YAML tokens."""
    try:
        for token in yaml.scan(text, Loader=yaml.SafeLoader):
            if isinstance(token, yaml.AliasToken | yaml.AnchorToken):
                raise SkillFormatError(
                    "the front matter uses YAML anchors or aliases (`&`/`*`): write values out."
                )
            if isinstance(token, yaml.ScalarToken) and token.style == '"':
                _refuse_escapes(text, token)
    except yaml.YAMLError as exc:
        raise _yaml_error(exc) from None


def _refuse_escapes(text: str, token) -> None:
    r"""A double-quoted value may escape only what stays visible as itself (a backslash, a
    quote, a slash, a space, a tab or a line break). `\x49`, `\u…`, `\U000E00xx`, `\N`, a
    backslash at a line end (which joins two lines inside a word) and the rest decode to
    text the raw SKILL.md does not show: a reviewer (and the scanner) would read one thing
    and the model another."""
    source = text[token.start_mark.index : token.end_mark.index]
    for match in ESCAPE_RE.finditer(source):
        if match.group(0) in VISIBLE_ESCAPES:
            continue
        line = token.start_mark.line + 2 + source.count("\n", 0, match.start())
        if "\n" in match.group(0):
            shown = "a backslash at a line end"
        else:
            width = ESCAPE_WIDTH.get(match.group(0)[1], 2)  # \x49, \u0049, \U000E0049
            shown = f"the escape `{source[match.start() : match.start() + width]}`"
        raise SkillFormatError(
            f"the front matter uses {shown} in a double-quoted value (line {line}): "
            "write the characters themselves, or use a plain or single-quoted value. Escapes "
            r"other than \\, \", \/, \t, \n and an escaped space are refused so "
            "that what a reviewer reads is what the model gets."
        )


def _yaml_error(exc: yaml.YAMLError) -> SkillFormatError:
    where = ""
    mark = getattr(exc, "problem_mark", None)
    if mark is not None:
        where = f" at line {mark.line + 2}, column {mark.column + 1}"
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return SkillFormatError(
        f"the front matter is not valid YAML{where}: {problem}. Quote values that contain ': '."
    )


def _json_safe(value):
    """YAML dates and odd scalars as JSON: the parsed front matter is stored as JSON."""
    if isinstance(value, dict):
        return {str(key): _json_safe(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_safe(item) for item in value]
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, bytes):
        raise SkillFormatError("the front matter holds binary data (!!binary): use text.")
    return value


def _string_list(front: dict, key: str, *, slugs: bool = False) -> None:
    if key not in front:
        return
    value = front[key]
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise SkillFormatError(f"`{key}` must be a list of strings, like [a, b].")
    if len(value) > LIST_MAX:
        raise SkillFormatError(f"`{key}` has {len(value)} items; at most {LIST_MAX} are allowed.")
    for item in value:
        if slugs:
            check_name(item, what=f"{key} item")
        elif len(item) > NAME_MAX:
            raise SkillFormatError(f"`{key}` item {item[:20]!r}… is longer than {NAME_MAX}.")
    front[key] = value


def _check_front_matter(front: dict) -> dict:
    check_name(front.get("name"))
    description = front.get("description")
    if not isinstance(description, str) or not description.strip():
        raise SkillFormatError(
            "`description` is missing: add one line saying what the skill does and when to use it."
        )
    if len(description) > DESCRIPTION_MAX:
        raise SkillFormatError(
            f"`description` has {len(description):,} characters; at most {DESCRIPTION_MAX:,} "
            "are allowed. Move detail into the body."
        )
    for key in ("version", "license"):
        if key in front:
            value = front[key]
            if isinstance(value, bool) or not isinstance(value, str | int | float):
                raise SkillFormatError(f'`{key}` must be a short string, like "1.0".')
            front[key] = str(value)
            if len(front[key]) > NAME_MAX:
                raise SkillFormatError(f"`{key}` is longer than {NAME_MAX} characters.")
    if "metadata" in front and not isinstance(front["metadata"], dict):
        raise SkillFormatError("`metadata` must be a mapping (key: value lines indented below).")
    _check_requirements(front)
    _string_list(front, "tags")
    _string_list(front, "related_skills", slugs=True)
    return front


def _check_requirements(front: dict) -> None:
    """`metadata.hermes.requires_tools` (tool names) and `requires_toolsets` (tool server
    slugs), as Hermes Agent writes them: lists of at most LIST_MAX names, each a valid
    function name; a comma- or space-separated string is read as a list."""
    hermes = (front.get("metadata") or {}).get("hermes")
    if not isinstance(hermes, dict):
        return  # free form: nothing the hub reads
    for key in REQUIREMENT_KEYS:
        if key not in hermes or hermes[key] is None:
            continue
        value = hermes[key]
        if isinstance(value, str):
            value = value.replace(",", " ").split()
        where = f"`metadata.hermes.{key}`"
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise SkillFormatError(
                f"{where} must be a list of tool names, like [staging__build_image]."
            )
        if len(value) > LIST_MAX:
            raise SkillFormatError(
                f"{where} has {len(value)} items; at most {LIST_MAX} are allowed."
            )
        for item in value:
            if not TOOL_NAME_RE.match(item):
                raise SkillFormatError(
                    f"{where} item {item[:70]!r} is not a tool name: use letters, digits, "
                    "'_' and '-', at most 64 characters (`<server>__<tool>` for a tool "
                    "server's tool, as the model sees it)."
                )
        hermes[key] = list(dict.fromkeys(value))  # in order, once each


def required_tools(front_matter) -> dict:
    """What a validated front matter says the skill needs: {"tools": [...], "toolsets":
    [...]}, only the keys it names ({} for none)."""
    metadata = front_matter.get("metadata") if isinstance(front_matter, dict) else None
    hermes = metadata.get("hermes") if isinstance(metadata, dict) else None
    if not isinstance(hermes, dict):
        return {}
    needs = {}
    for key, short in zip(REQUIREMENT_KEYS, ("tools", "toolsets"), strict=True):
        value = hermes.get(key)
        if isinstance(value, list) and value:
            needs[short] = [item for item in value if isinstance(item, str)][:LIST_MAX]
    return needs


def split_front_matter(text: str) -> tuple[str, str]:
    """(YAML text, body) of a SKILL.md, or SkillFormatError if the `---` lines are missing."""
    if not text.startswith("---"):
        raise SkillFormatError(
            "SKILL.md must start with front matter: a line `---`, `name: <slug>`, "
            "`description: <one line>`, then a line `---` and the Markdown body."
        )
    lines = text.split("\n")
    if lines[0].rstrip() != "---":
        raise SkillFormatError("the first line of SKILL.md must be exactly `---`.")
    for index in range(1, len(lines)):
        if lines[index].rstrip() in ("---", "..."):
            return "\n".join(lines[1:index]), "\n".join(lines[index + 1 :])
    raise SkillFormatError(
        "the front matter is not closed: add a line `---` after the last front matter field."
    )


def parse_skill_md(text: str, *, expected_name: str | None = None) -> ParsedSkill:
    """The validated front matter and body of `text`; with `expected_name`, the front matter
    `name` must equal it (a skill is never renamed by its content)."""
    if not isinstance(text, str) or not text.strip():
        raise SkillFormatError("SKILL.md is empty: write front matter and a body.")
    if "\x00" in text:
        raise SkillFormatError("SKILL.md contains a NUL character: remove it.")
    text = text.removeprefix("\ufeff")
    yaml_text, body = split_front_matter(text)
    if len(yaml_text) > FRONT_MATTER_MAX:
        raise SkillFormatError(
            f"the front matter has {len(yaml_text):,} characters; at most {FRONT_MATTER_MAX:,} "
            "are allowed. Move detail into the body."
        )
    _refuse_aliases(yaml_text)
    try:
        front = yaml.safe_load(yaml_text)
    except yaml.YAMLError as exc:
        raise _yaml_error(exc) from None
    if not isinstance(front, dict):
        raise SkillFormatError(
            "the front matter must be `key: value` lines (a YAML mapping) with at least "
            "`name` and `description`."
        )
    front = _check_front_matter(_json_safe(front))
    if expected_name is not None and front["name"] != expected_name:
        raise SkillFormatError(
            f"the front matter says `name: {front['name']}` but this skill is {expected_name!r}; "
            f"keep `name: {expected_name}` (skills are not renamed by editing)."
        )
    if not body.strip():
        raise SkillFormatError("the body is empty: write the procedure below the front matter.")
    if len(body) > BODY_MAX:
        raise SkillFormatError(
            f"the body has {len(body):,} characters; at most {BODY_MAX:,} are allowed. Move "
            "long material into references/ files and link them from the body."
        )
    return ParsedSkill(front_matter=front, body=body)


def normalise_path(path) -> str:
    """A supporting file's path inside the skill folder, normalised (`references/a.md`,
    `LICENSE.txt`), or SkillFormatError: never absolute, never with `..`, backslashes, NUL,
    control or invisible characters or hidden segments (`.env`), never a file named SKILL.md
    (that would be a skill of its own)."""
    if not isinstance(path, str) or not path.strip():
        raise SkillFormatError(
            "`file_path` is missing: give a path inside the skill, e.g. references/api.md."
        )
    if "\x00" in path:
        raise SkillFormatError("`file_path` contains a NUL character.")
    if "\\" in path:
        raise SkillFormatError("`file_path` contains a backslash: use '/' between folders.")
    if path.startswith(("/", "~")) or re.match(r"^[A-Za-z]:", path):
        raise SkillFormatError(
            f"`file_path` {path!r} is absolute: give a path inside the skill, e.g. "
            "references/api.md."
        )
    path = unicodedata.normalize("NFC", path.strip())
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if any(part == ".." for part in parts):
        raise SkillFormatError(f"`file_path` {path!r} leaves the skill ('..'): remove '..'.")
    if not parts:
        raise SkillFormatError(f"`file_path` {path!r} names no file.")
    if parts[-1] == SKILL_FILE:
        if len(parts) == 1:
            raise SkillFormatError(
                "SKILL.md is not a supporting file: use action `edit` or `patch` to change it."
            )
        raise SkillFormatError(
            f"`file_path` {path!r} is a SKILL.md inside the skill, which would make a skill of "
            "its own: choose another file name."
        )
    for part in parts:
        if any(unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") for ch in part):
            raise SkillFormatError(
                f"`file_path` {path!r} contains control or invisible characters."
            )
        if part.startswith("."):
            raise SkillFormatError(f"`file_path` {path!r} has a hidden segment {part!r}.")
        if len(part) > SEGMENT_MAX:
            raise SkillFormatError(f"a folder or file name in `file_path` exceeds {SEGMENT_MAX}.")
    normalised = "/".join(parts)
    if len(normalised) > PATH_MAX:
        raise SkillFormatError(f"`file_path` has more than {PATH_MAX} characters.")
    return normalised


def is_binary(content: bytes) -> bool:
    """Whether a file's bytes are stored as a binary: not UTF-8, or holding a NUL."""
    if b"\x00" in content:
        return True
    try:
        content.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def check_file_content(path: str, content) -> str:
    """Text of at most FILE_MAX_BYTES (UTF-8), without NUL; else SkillFormatError."""
    if isinstance(content, bytes):
        try:
            content = content.decode("utf-8")
        except UnicodeDecodeError:
            raise SkillFormatError(
                f"{path} is not UTF-8 text: write text, or import the file as a binary with "
                "import_skills."
            ) from None
    if not isinstance(content, str):
        raise SkillFormatError(f"the content of {path} must be text.")
    if "\x00" in content:
        raise SkillFormatError(f"{path} contains NUL characters: write text without them.")
    size = len(content.encode("utf-8"))
    if size > FILE_MAX_BYTES:
        raise SkillFormatError(
            f"{path} has {size:,} bytes; a text file may have at most {FILE_MAX_BYTES:,} "
            "(1 MiB). Split it into several files."
        )
    return content


def check_binary(path: str, content: bytes) -> bytes:
    """Bytes of at most BINARY_MAX_BYTES; else SkillFormatError."""
    if not isinstance(content, bytes):
        raise SkillFormatError(f"the content of binary file {path} must be bytes.")
    if len(content) > BINARY_MAX_BYTES:
        raise SkillFormatError(
            f"{path} has {len(content):,} bytes; a binary file may have at most "
            f"{BINARY_MAX_BYTES:,} (16 MiB)."
        )
    return content


def check_files(files: dict, binaries: dict | None = None) -> dict:
    """Every text file's path normalised and content checked, and the skill's limits kept
    (with `binaries`, {path: size} of its binary files): at most MAX_FILES files, at most
    TEXT_TOTAL_MAX_BYTES of text and SKILL_MAX_BYTES in all."""
    binaries = binaries or {}
    if len(files) + len(binaries) > MAX_FILES:
        raise SkillFormatError(
            f"a skill may have at most {MAX_FILES} supporting files; this one has "
            f"{len(files) + len(binaries)}."
        )
    checked = {}
    for path, content in files.items():
        normal = normalise_path(path)
        if normal in checked or normal in binaries:
            raise SkillFormatError(f"two files normalise to the same path {normal!r}.")
        checked[normal] = check_file_content(normal, content)
    text = sum(len(content.encode("utf-8")) for content in checked.values())
    if text > TEXT_TOTAL_MAX_BYTES:
        raise SkillFormatError(
            f"the text files of a skill may have at most {TEXT_TOTAL_MAX_BYTES:,} bytes in all "
            f"(8 MiB); these have {text:,}."
        )
    total = text + sum(binaries.values())
    if total > SKILL_MAX_BYTES:
        raise SkillFormatError(
            f"the files of a skill may have at most {SKILL_MAX_BYTES:,} bytes in all (64 MiB); "
            f"these have {total:,}."
        )
    return dict(sorted(checked.items()))


def content_hash(skill_md: str, files: dict, binaries: dict | None = None) -> str:
    """SHA-256 over SKILL.md, the text files and the binaries' paths and hashes, independent
    of dict order. Without binaries it is the hash text-only versions always had."""
    content = {"skill_md": skill_md, "files": dict(sorted(files.items()))}
    if binaries:
        content["binaries"] = dict(sorted(binaries.items()))
    canonical = json.dumps(content, ensure_ascii=False, sort_keys=True)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def render_skill_md(*, name: str, description: str, body: str, extra: dict | None = None) -> str:
    """A SKILL.md from its parts (used by tests and the bench; the model writes its own)."""
    front = {"name": name, "description": description, **(extra or {})}
    yaml_text = yaml.safe_dump(front, sort_keys=False, allow_unicode=True, width=10_000)
    return f"---\n{yaml_text}---\n{body}"
