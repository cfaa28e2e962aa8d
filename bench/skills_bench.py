"""Benchmark: what skills add to every turn (the prompt index) and to a view and a patch.

    .venv/bin/python bench/skills_bench.py [--skills 500] [--runs 100] [--database-url postgres://…]

Measures, on a throw-away database holding `--skills` skills (≈ 2 KB SKILL.md each, every
fifth with a references/ file, across 12 categories):
* the skills index of the system prompt (the work added to every turn's context build), with
  10 more skills about one topic (Kafka consumers) planted in a category that sorts late and
  a conversation about that topic: build time when the chat's choice is kept (the common
  turn) and when it is chosen anew, its tokens within SKILLS_INDEX_TOKENS, how many skills
  it lists and how many of the 10 planted ones, against the plain alphabetical listing; and
  kept again once every fifth skill names tools of a tool server, half of them with a tool
  that is off in the chat (`metadata.hermes.requires_tools`: the index marks those);
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

    # A skill reviewer (staff) in a terminal profile, her own chat: her changes of the team's
    # skills apply at once (a non-reviewer's would wait for a reviewer as proposals).
    person = get_user_model().objects.create_user("bench-alice", is_staff=True)
    message = message_ingest(
        channel="cli",
        chat_id="bench-profile",
        user_id="bench-alice",
        text="hi",
        person=person,
    ).message
    chat_member_ensure(chat=message.chat, person=person)
    return TurnContext(chat=message.chat, trigger=message, actor=message.actor, person=person)


PLANTED_CATEGORY = "streaming"
PLANTED = [
    ("kafka-consumer-lag", "Find why a Kafka consumer group falls behind: lag per partition, "
     "slow handlers, stuck offsets. Use when consumer lag keeps growing."),
    ("kafka-rebalance-storm", "Stop a consumer group from rebalancing in a loop. Use when "
     "Kafka consumers keep rejoining the group after a deploy."),
    ("kafka-stuck-partition", "Locate and unblock a stuck Kafka partition. Use when one "
     "partition's lag grows while the others drain."),
    ("kafka-offset-reset", "Reset consumer group offsets safely, with a dry run first. Use "
     "when a consumer must replay or skip Kafka messages."),
    ("kafka-dead-letter", "Route poison messages to a dead-letter topic. Use when one bad "
     "Kafka message blocks a consumer."),
    ("kafka-partition-count", "Choose and change the partition count of a topic. Use when "
     "consumers cannot keep up and more partitions are needed."),
    ("kafka-broker-disk", "Free disk on a Kafka broker: retention, segment size, "
     "reassignment. Use when a broker disk alarm fires."),
    ("kafka-schema-change", "Roll out a schema change to a Kafka topic without breaking "
     "consumers. Use when the message format changes."),
    ("kafka-consumer-deploy", "Deploy a new consumer version without lag spikes: cooperative "
     "rebalancing, canaries. Use when shipping a consumer."),
    ("kafka-lag-alert", "Tune consumer lag alerts per group and partition. Use when the lag "
     "alert is noisy or silent."),
]  # fmt: skip
CONVERSATION = [
    "The orders service is slow to pick up new events since this morning.",
    "Grafana shows the Kafka consumer group lag for orders-events climbing on one partition.",
    "How do we find the stuck partition and get the group to catch up without losing messages?",
]


def plant():
    """Ten skills about one topic (Kafka consumers) in a category that sorts after the 40
    skills an alphabetical listing would show."""
    from skills.format import render_skill_md
    from skills.models import Via
    from skills.services import Author, skill_import

    for slug, description in PLANTED:
        outcome = skill_import(
            name=slug,
            content=render_skill_md(name=slug, description=description, body=f"# {slug}\n"),
            files={},
            category=PLANTED_CATEGORY,
            author=Author(via=Via.COMMAND),
        )
        assert outcome.code == "applied", outcome.message


def index_conversation():
    """A web chat whose user messages are about the planted skills' topic."""
    from chats.agent.history import history_bounds
    from chats.agent.registry import TurnContext
    from chats.services import message_ingest

    for text in CONVERSATION:
        message = message_ingest(
            channel="web", chat_id="bench-index", user_id="bob", user_name="Bob", text=text
        ).message
    # As the context builder passes it to prompt sections: where the history starts.
    start = history_bounds(message.chat, before_id=message.pk).start_id
    return TurnContext(
        chat=message.chat, trigger=message, actor=message.actor, history_start_id=start
    )


def _working_cache():
    """The configured cache when it answers, else a local-memory one (said in the output)."""
    from django.conf import settings
    from django.core.cache import cache
    from django.test.utils import override_settings

    try:
        cache.set("skills-bench-probe", 1, 5)
        NOTES.append(f"cache: {settings.CACHES['default']['BACKEND'].rsplit('.', 1)[-1]}")
        return contextlib.nullcontext()
    except Exception:  # noqa: BLE001
        NOTES.append("cache: LocMemCache (the configured Redis did not answer; set REDIS_URL)")
        locmem = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
        return override_settings(CACHES=locmem)


NOTES: list[str] = []


def index_rows(runs: int) -> list[list]:
    """The index as a turn builds it: kept (the same topic as the turn before: the common
    case), chosen anew (a new conversation, a compressed context or a new topic), and the
    plain alphabetical listing for comparison; how many of the 10 planted skills each lists."""
    from django.conf import settings
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from chats.agent.tokens import count_tokens
    from skills import index
    from skills.index import index_line, line_tokens, pointer_line
    from skills.prompt import HEADER, skills_section
    from skills.selectors import skills_index_rows

    def render_index(rows, budget):
        # The listing before the choice existed: the first lines that fit, then the pointer.
        used, lines = line_tokens(HEADER), []
        for number, row in enumerate(rows):
            line, more = index_line(row), pointer_line(len(rows) - number)
            if used + line_tokens(line) + line_tokens(more) > budget:
                lines.append(more)
                break
            lines.append(line)
            used += line_tokens(line)
        return "\n".join([HEADER, *lines])

    plant()
    context = index_conversation()
    planted = {slug for slug, _ in PLANTED}
    rows = []

    def described(label, render, text, timings):
        with CaptureQueriesContext(connection) as queries:
            render()
        names = [line[2:].split(" ", 1)[0].rstrip(":") for line in text.splitlines()[2:]]
        names = [name for name in names if name != "…"]
        rows.append(
            [
                label,
                common.percentile(timings, 50) if timings else "—",
                common.percentile(timings, 95) if timings else "—",
                count_tokens(text),
                len(names),
                f"{len(planted & set(names))} of 10",
                len(queries.captured_queries),
            ]
        )

    NOTES.append(f"SKILLS_INDEX_TOKENS: {settings.SKILLS_INDEX_TOKENS:,}")
    with _working_cache():
        text = skills_section.render(context)  # chooses once
        kept = lambda: skills_section.render(context)  # noqa: E731
        assert kept() == text, "the kept index must not change between turns"
        described(
            "kept (same topic as the turn before)",
            kept,
            text,
            common.timings_ms(kept, runs=runs, warmup=3),
        )
        remembered = index._cache_get
        index._cache_get = lambda chat, part="": None  # every turn a new conversation
        try:
            chosen = lambda: skills_section.render(context)  # noqa: E731
            described(
                "chosen anew (new conversation or topic)",
                chosen,
                chosen(),
                common.timings_ms(chosen, runs=runs, warmup=3),
            )
        finally:
            index._cache_get = remembered
    # The listing before the choice existed (one query, the first lines that fit), timed
    # under the same load as the rows above.
    alphabetical = lambda: render_index(skills_index_rows(), settings.SKILLS_INDEX_TOKENS)  # noqa: E731
    described(
        "alphabetical listing (no choice), for comparison",
        alphabetical,
        alphabetical(),
        common.timings_ms(alphabetical, runs=runs, warmup=3),
    )
    with _working_cache():
        needing = name_tools()
        marked = lambda: skills_section.render(context)  # noqa: E731
        text = marked()  # the longer lines may choose once more; then the choice is kept
        assert marked() == text, "the kept index must not change between turns"
        described(
            f"kept, {needing} skills naming tools (half not on here)",
            marked,
            text,
            common.timings_ms(marked, runs=runs, warmup=3),
        )
        from skills.models import Skill

        Skill.objects.update(required_tools={})  # the rows below measure skills as before
    everything = skills_index_rows()
    whole = render_index(everything, 10**7)
    rows.append(["(the whole index, uncut)", "—", "—", count_tokens(whole), len(everything),
                 "10 of 10", "—"])  # fmt: skip
    return rows


def name_tools() -> int:
    """Every fifth skill names three tools of a tool server `ops` (build, push: on in the
    index's chat; deploy: announced, off there), as `metadata.hermes.requires_tools` would;
    how many skills now name tools."""
    from chats.models import Chat
    from skills.models import Skill
    from toolservers.services import (
        VIA_COMMAND,
        server_add,
        server_tools_record,
        toolset_set,
    )

    server = server_add(
        by=None, via=VIA_COMMAND, slug="ops", transport="http", url="http://127.0.0.1:9/mcp"
    )
    server_tools_record(
        server=server, announced=[{"name": name} for name in ("build", "push", "deploy")]
    )
    chat = Chat.objects.get(channel="web", external_id="bench-index")
    for tool in ("build", "push"):
        toolset_set(
            by=None, via=VIA_COMMAND, chat=chat, server=server, tool_name=tool, policy="allow"
        )
    needs = {"tools": ["ops__build", "ops__push"]}
    half = {"tools": ["ops__build", "ops__push", "ops__deploy"]}
    ids = list(Skill.objects.order_by("slug").values_list("pk", flat=True))[::5]
    Skill.objects.filter(pk__in=ids[::2]).update(required_tools=needs)
    Skill.objects.filter(pk__in=ids[1::2]).update(required_tools=half)
    return len(ids)


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
        index = index_rows(args.runs)
        view = view_rows(args.runs, context)
        patch = patch_rows(args.runs, context)
        worst = worst_patch_rows(args.worst_runs, context) + worst_diff_rows(args.worst_runs)
        common.close_django_connections()
    print(
        f"Database: {database}; {args.skills} skills + {len(PLANTED)} planted; "
        f"{args.runs} runs each; {'; '.join(NOTES)}.\n"
    )
    print(
        common.markdown_table(
            [
                "skills index",
                "p50 ms",
                "p95 ms",
                "tokens",
                "skills listed",
                "planted listed",
                "SQL queries",
            ],
            index,
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
