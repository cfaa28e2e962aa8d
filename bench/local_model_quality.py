"""How well the local demo model answers 20 simple questions, through the hub's real path.

Each question goes through `manage.py chat -m QUESTION` (run in this process with
`call_command`, so the model loads once): the terminal chat's system prompt, the context
builder and the local provider, exactly as a new user meets them. Two conditions:
- fresh: each question in a new terminal chat;
- second: each question as the second message of a chat whose first was
  "What is 12 times 12?" (the reported failure: "Which command lists files in a directory
  on Linux?" answered "12 * 3 = 36").
An answer scores when it contains one of the question's expected substrings (case-
insensitive) and, for the second condition, is not an answer to the first question.

Sampling is greedy (temperature 0) so runs compare; replies are capped at --max-tokens.
Needs the `local` extra. Usage:
    .venv/bin/python bench/local_model_quality.py [--max-tokens 48] [--show]
"""

import argparse
import io
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402

FIRST_QUESTION = "What is 12 times 12?"
FIRST_ANSWER_MARKS = ("144", "12 * 12", "12 x 12", "12 times 12")

# (question, expected substrings: any one counts)
QUESTIONS: list[tuple[str, tuple[str, ...]]] = [
    ("Which command lists files in a directory on Linux?", ("ls",)),
    ("What is the capital of France?", ("paris",)),
    ("What is 7 plus 5?", ("12", "twelve")),
    ("How many centimetres are in a metre?", ("100", "hundred")),
    ("What is the capital of Japan?", ("tokyo",)),
    ("Which Linux command shows the current directory?", ("pwd",)),
    ("How many days are in a week?", ("7", "seven")),
    ("What is 9 minus 4?", ("5", "five")),
    ("What is the chemical symbol for water?", ("h2o", "h₂o")),
    ("How many minutes are in an hour?", ("60", "sixty")),
    ("Which Linux command copies a file?", ("cp",)),
    ("What is the capital of Italy?", ("rome",)),
    ("How many grams are in a kilogram?", ("1000", "1,000", "thousand")),
    ("What colour is the sky on a clear day?", ("blue",)),
    ("Which command removes a file on Linux?", ("rm",)),
    ("What is 3 times 4?", ("12", "twelve")),
    ("What is the largest planet in our solar system?", ("jupiter",)),
    ("How many legs does a spider have?", ("8", "eight")),
    ("What is the capital of Germany?", ("berlin",)),
    ("At what temperature in Celsius does water freeze?", ("0", "zero")),
]


def _words(text: str) -> set[str]:
    cleaned = "".join(ch if ch.isalnum() or ch in "₂" else " " for ch in text.lower())
    return set(cleaned.split())


def scores(answer: str, expected: tuple[str, ...], *, after_first: bool) -> bool:
    """Whether `answer` contains an expected substring (a whole word for short ones such as
    `ls`, `cp` or `5`) and, after the first question, does not answer that one instead."""
    lowered = answer.lower()
    words = _words(answer)
    found = any((mark in words) if len(mark) <= 3 else (mark in lowered) for mark in expected)
    if after_first and any(mark in lowered for mark in FIRST_ANSWER_MARKS):
        return False  # "144" or "12 times 12" in an answer to another question
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--show", action="store_true", help="print every answer")
    parser.add_argument("--limit", type=int, default=len(QUESTIONS))
    parser.add_argument("--second-only", action="store_true", help="skip the fresh chats")
    parser.add_argument(
        "--earlier-exchanges",
        type=int,
        default=None,
        help="history the model reads (default: the provider's)",
    )
    args = parser.parse_args()

    with common.temporary_database(None, label="localq") as url:
        common.setup_django(url)
        common.migrate()
        from django.core.management import call_command

        from chats.agent.llm import local
        from chats.models import Chat, Message

        if not local.LocalProvider.available():
            print("the local model is not installed: scripts/install-local-model")
            return 2
        local.SAMPLING = {**local.SAMPLING, "temperature": 0.0, "seed": 1}
        if args.earlier_exchanges is not None:
            local.EARLIER_EXCHANGES = args.earlier_exchanges
        original_stream = local.LocalProvider.stream
        prompts: list[list[dict]] = []

        def capped_stream(self, messages, *, max_tokens=None, **options):
            prompts.append(messages)
            return original_stream(self, messages, max_tokens=args.max_tokens, **options)

        local.LocalProvider.stream = capped_stream
        from django.test.utils import override_settings

        def ask(profile: str, question: str) -> str:
            call_command(
                "chat",
                message=question,
                profile=profile,
                stdout=io.StringIO(),
                stderr=io.StringIO(),
            )
            chat = Chat.objects.get(channel="cli", external_id=profile)
            reply = chat.messages.filter(role=Message.Role.ASSISTANT).order_by("-id").first()
            return reply.text if reply else ""

        with override_settings(LLM_PROVIDER="local"):
            from chats.agent.llm.factory import reset_provider_cache

            reset_provider_cache()
            rows = []
            totals = {"fresh": 0, "second": 0}
            first_ok = 0
            started = time.monotonic()
            for index, (question, expected) in enumerate(QUESTIONS[: args.limit]):
                fresh = "" if args.second_only else ask(f"fresh-{index}", question)
                first = ask(f"second-{index}", FIRST_QUESTION)
                second = ask(f"second-{index}", question)
                fresh_ok = scores(fresh, expected, after_first=False)
                second_ok = scores(second, expected, after_first=True)
                first_ok += "144" in first
                totals["fresh"] += fresh_ok
                totals["second"] += second_ok
                rows.append(
                    (
                        question,
                        " / ".join(expected),
                        "yes" if fresh_ok else "no",
                        "yes" if second_ok else "no",
                    )
                )
                if args.show:
                    print(
                        f"\n## {question}\n  fresh:  {fresh!r}\n  first:  {first!r}\n"
                        f"  second: {second!r}"
                    )
            count = len(rows)
            print()
            print(
                common.markdown_table(["question", "expected", "fresh chat", "after 12×12"], rows)
            )
            print(
                f"\nfresh chat: {totals['fresh']}/{count}; as the second question: "
                f"{totals['second']}/{count}; the first question (144) right {first_ok}/{count}; "
                f"{time.monotonic() - started:.0f} s; max_tokens={args.max_tokens}, greedy"
            )
            if prompts:
                system = (
                    prompts[-1][0].get("content") if prompts[-1][0].get("role") == "system" else ""
                )
                print(
                    f"system prompt: {len(system or '')} characters; "
                    f"last request: {len(prompts[-1])} messages"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
