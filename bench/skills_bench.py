"""Benchmark: what skills add to every turn (the prompt index) and to a view and a patch.

    .venv/bin/python bench/skills_bench.py [--skills 500] [--runs 100] [--database-url postgres://…]

Measures, on a throw-away database holding `--skills` skills (≈ 2 KB SKILL.md each, every
fifth with a references/ file, across 12 categories):
* the skills index of the system prompt (the work added to every turn's context build):
  build time, its tokens within SKILLS_INDEX_TOKENS, and how many skills it lists;
* `skill_view` through the tool handler (read, format, usage row);
* `skill_patch` applied at once (row lock, tolerant match, parse, scan, new version, audit),
  on a 2 KB skill and on a 50 KB one;
* the worst cases a person can trigger (`--worst-runs` each, reported as p100): a
  `replace_all` at the size limits (a SKILL.md at its body limit, a 1 MiB supporting file,
  and one refused before it is built), and a diff of two contents at the limits made of
  one-character lines (the alignment's worst case), uncached and then from the cache. While
  each runs, another process keeps writing (a message in another chat, and a use of the very
  skill, which locks its row): its latencies show whether a database lock is held while the
  work is computed.
Prints Markdown tables with p50/p95 (p100 for the worst cases) and the machine.
"""

import argparse
import contextlib
import multiprocessing
import random
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402

CATEGORIES = [
    "devops", "research", "writing", "data", "security", "support",
    "billing", "mobile", "frontend", "backend", "ml", "docs",
]  # fmt: skip
STEP = (
    "{n}. Run `make check-{n}` in the service folder and compare the output with the last "
    "release notes; if a value differs by more than 5 %, stop and ask the owner.\n"
)


def skill_text(slug: str, n: int, *, body_chars: int = 2000) -> str:
    from skills.format import render_skill_md

    steps, k = [], 1
    while sum(len(s) for s in steps) < body_chars:
        steps.append(STEP.format(n=k))
        k += 1
    body = f"# {slug}\n\nWhen to use: task family {n}.\n\n" + "".join(steps)
    description = (
        f"Procedure {n} for the {CATEGORIES[n % len(CATEGORIES)]} team: checks, commands and "
        "who to ask when the numbers disagree."
    )
    return render_skill_md(name=slug, description=description, body=body)


def fill(count: int):
    from skills.models import Via
    from skills.services import Author, skill_import

    author = Author(via=Via.COMMAND)
    for n in range(count):
        slug = f"procedure-{n:04d}"
        files = {"references/notes.md": f"Notes for {slug}.\n" * 20} if n % 5 == 0 else {}
        outcome = skill_import(
            name=slug,
            content=skill_text(slug, n),
            files=files,
            category=CATEGORIES[n % len(CATEGORIES)],
            author=author,
        )
        assert outcome.code == "applied", outcome.message
    big = skill_import(
        name="big-runbook",
        content=skill_text("big-runbook", 0, body_chars=50_000),
        files={},
        category="devops",
        author=author,
    )
    assert big.code == "applied", big.message


def turn_context():
    from django.contrib.auth import get_user_model

    from chats.agent.registry import TurnContext
    from chats.services import chat_member_ensure, message_ingest

    person = get_user_model().objects.create_user("bench-alice")
    message = message_ingest(
        # A terminal profile: the person's own chat, where their changes apply at once.
        channel="cli",
        chat_id="bench-profile",
        user_id="bench-alice",
        text="hi",
        person=person,
    ).message
    chat_member_ensure(chat=message.chat, person=person)
    return TurnContext(chat=message.chat, trigger=message, actor=message.actor, person=person)


def index_rows(runs: int, context) -> list[list]:
    from django.conf import settings
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from chats.agent.tokens import count_tokens
    from skills.prompt import render_index, skills_section
    from skills.selectors import skills_index_rows

    text = skills_section.render(context)
    with CaptureQueriesContext(connection) as queries:
        skills_section.render(context)
    timings = common.timings_ms(lambda: skills_section.render(context), runs=runs, warmup=3)
    listed = sum(1 for line in text.splitlines() if line.startswith("- ") and "more:" not in line)
    whole = render_index(skills_index_rows(), 10**7)
    return [
        [
            f"skills index, budget {settings.SKILLS_INDEX_TOKENS:,} tokens",
            common.percentile(timings, 50),
            common.percentile(timings, 95),
            count_tokens(text),
            listed,
            len(queries.captured_queries),
        ],
        ["(the whole index, uncut, for comparison)", "—", "—", count_tokens(whole), "all", "—"],
    ]


def view_rows(runs: int, context) -> list[list]:
    from skills.tools import _view

    names = iter(range(10**7))

    def view():
        result = _view(context, {"name": f"procedure-{next(names) % 500:04d}"})
        assert result.startswith("Skill "), result

    def view_file():
        result = _view(context, {"name": "procedure-0000", "path": "references/notes.md"})
        assert "Notes for" in result, result

    rows = []
    for label, function in (("skill_view, SKILL.md", view), ("skill_view, a file", view_file)):
        timings = common.timings_ms(function, runs=runs, warmup=3)
        rows.append([label, common.percentile(timings, 50), common.percentile(timings, 95)])
    return rows


def patch_rows(runs: int, context) -> list[list]:
    from skills.services import Author, skill_patch

    author = Author(person=context.person, actor=context.actor, chat=context.chat)
    rows = []
    for label, name in (
        ("skill_patch, 2 KB skill, applied", "procedure-0001"),
        ("skill_patch, 50 KB skill, applied", "big-runbook"),
    ):
        flip = iter(range(10**7))

        def patch(name=name, flip=flip):
            # Alternate the wording so every patch is a real change (and a new version).
            old, new = ("ask the owner", "page the owner")
            if next(flip) % 2:
                old, new = new, old
            outcome = skill_patch(
                name=name,
                old_string=f"differs by more than 5 %, stop and {old}.\n2.",
                new_string=f"differs by more than 5 %, stop and {new}.\n2.",
                author=author,
            )
            assert outcome.code == "applied", outcome.message

        timings = common.timings_ms(patch, runs=runs, warmup=3)
        rows.append([label, common.percentile(timings, 50), common.percentile(timings, 95)])
    return rows


# --- Worst cases ------------------------------------------------------------------------


def _writer(stop, results, skill_pk: int) -> None:
    """In another process: write until `stop`, timing each write (ms)."""
    from django.db import connection

    from chats.services import message_ingest
    from skills.models import Skill
    from skills.services import skill_usage_record

    connection.close()  # never share the parent's connection
    skill = Skill.objects.get(pk=skill_pk)
    latencies, n = [], 0
    while not stop.is_set():
        started = time.perf_counter()
        message_ingest(channel="cli", chat_id="bench-other", user_id="bob", text=f"post {n}")
        skill_usage_record(skill=skill, version=None, path="")
        latencies.append((time.perf_counter() - started) * 1000)
        n += 1
        time.sleep(0.01)
    results.put(latencies)
    connection.close()


@contextlib.contextmanager
def concurrent_writes(skill_pk: int):
    """Another process writing while the block runs; yields the list its latencies fill."""
    common.close_django_connections()  # the child opens its own
    context = multiprocessing.get_context("fork")
    stop, results = context.Event(), context.Queue()
    process = context.Process(target=_writer, args=(stop, results, skill_pk))
    process.start()
    latencies: list[float] = []
    time.sleep(0.3)  # let it start writing first
    try:
        yield latencies
    finally:
        stop.set()
        latencies.extend(results.get(timeout=120))
        process.join(60)


def _worst(label: str, function, runs: int, skill_pk: int) -> list:
    timings = []
    with concurrent_writes(skill_pk) as writes:
        for _ in range(runs):
            timings.append(common.time_ms(function))
    return [
        label,
        max(timings),
        len(writes),
        common.percentile(writes, 50),
        max(writes),
    ]


def worst_patch_rows(runs: int, context) -> list[list]:
    from skills.format import BODY_MAX, FILE_MAX_BYTES
    from skills.models import Skill
    from skills.services import Author, skill_create, skill_file_write, skill_patch

    author = Author(person=context.person, actor=context.actor, chat=context.chat)
    lines = (BODY_MAX - 100) // 4
    content = skill_text("worst-patch", 0, body_chars=0).split("\n---\n")[0]
    content += "\n---\n# Worst case\n" + "- x\n" * lines
    created = skill_create(name="worst-patch", content=content, author=author)
    assert created.code == "applied", created.message
    big = "- x\n" * ((FILE_MAX_BYTES - 100) // 4)
    written = skill_file_write(
        name="worst-patch", file_path="references/big.md", file_content=big, author=author
    )
    assert written.code == "applied", written.message
    skill_pk = Skill.objects.get(slug="worst-patch").pk

    def flip(file_path: str):
        state = iter(range(10**7))

        def patch():
            old, new = ("- x", "- y") if next(state) % 2 == 0 else ("- y", "- x")
            outcome = skill_patch(
                name="worst-patch",
                old_string=old,
                new_string=new,
                replace_all=True,
                file_path=file_path,
                author=author,
            )
            assert outcome.code == "applied", outcome.message

        return patch

    def refused():
        # "- " starts every line whichever way the patches above left x and y.
        outcome = skill_patch(
            name="worst-patch", old_string="- ", new_string="y" * 1000, replace_all=True,
            author=author,
        )  # fmt: skip
        assert outcome.code == "invalid" and "would have up to" in outcome.message

    return [
        _worst(
            f"replace_all, SKILL.md at its body limit ({lines:,} matches)",
            flip(""),
            runs,
            skill_pk,
        ),
        _worst(
            f"replace_all, a 1 MiB file ({len(big) // 4:,} matches)",
            flip("references/big.md"),
            runs,
            skill_pk,
        ),
        _worst(
            f"replace_all refused before building ({lines:,} × 1,000 characters)",
            refused,
            runs,
            skill_pk,
        ),
    ]


def worst_diff_rows(runs: int) -> list[list]:
    from skills.diff import MAX_DIFF_CHARS, content_diff, content_diff_cached
    from skills.format import BODY_MAX, MAX_FILES, content_hash
    from skills.models import Skill

    pick = random.Random(7)

    def one_char_lines(chars: int) -> str:
        return "\n".join(pick.choice("ab") for _ in range(chars // 2))

    def side(files: int) -> SimpleNamespace:
        skill_md = "---\nname: worst-diff\ndescription: d\n---\n" + one_char_lines(BODY_MAX)
        contents = {f"references/f{n:02}.md": one_char_lines(MAX_DIFF_CHARS) for n in range(files)}
        return SimpleNamespace(
            skill_md=skill_md, files=contents, content_hash=content_hash(skill_md, contents)
        )

    skill_pk = Skill.objects.get(slug="worst-patch").pk
    rows = []
    for label, files in (
        ("diff, SKILL.md at its body limit, both sides", 0),
        (f"diff, SKILL.md + {MAX_FILES} files of {MAX_DIFF_CHARS:,} characters, both sides", 64),
    ):
        before, after = side(files), side(files)
        rows.append(
            _worst(
                label,
                lambda b=before, a=after: content_diff(b.skill_md, b.files, a.skill_md, a.files),
                runs,
                skill_pk,
            )
        )
    from django.core.cache import cache

    content_diff_cached(before=before, after=after)
    try:
        probe = f"bench-probe-{time.time_ns()}"
        cache.set(probe, 1, 60)
        cached = cache.get(probe) == 1
    except Exception:  # noqa: BLE001 - no cache server: say so in the label
        cached = False
    rows.append(
        _worst(
            "the same diff again, from the cache"
            if cached
            else "the same diff again (no cache server answered: computed again)",
            lambda: content_diff_cached(before=before, after=after),
            runs,
            skill_pk,
        )
    )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skills", type=int, default=500)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--worst-runs", type=int, default=5)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    with common.temporary_database(args.database_url, label="skills") as url:
        common.setup_django(url)
        common.migrate()
        database = common.database_description()
        fill(args.skills)
        context = turn_context()
        index = index_rows(args.runs, context)
        view = view_rows(args.runs, context)
        patch = patch_rows(args.runs, context)
        worst = worst_patch_rows(args.worst_runs, context) + worst_diff_rows(args.worst_runs)
        common.close_django_connections()
    print(f"Database: {database}; {args.skills} skills; {args.runs} runs each.\n")
    print(
        common.markdown_table(
            ["prompt", "p50 ms", "p95 ms", "tokens", "skills listed", "SQL queries"], index
        )
    )
    print()
    print(common.markdown_table(["tool", "p50 ms", "p95 ms"], view + patch))
    print()
    print(
        common.markdown_table(
            [
                f"worst case ({args.worst_runs} runs)",
                "p100 ms",
                "writes meanwhile",
                "write p50 ms",
                "write max ms",
            ],
            worst,
        )
    )
    print()
    for key, value in common.machine_info().items():
        print(f"- {key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
