"""The terminal channel: talk to the agent in the chat `cli:<profile>`.

Turns run in this process with the same engine as the workers; the reply streams as it
arrives and tool calls show inline. `/new` starts a fresh context (history kept), `/stop`
or Ctrl-C interrupts the running reply, `/quit` or Ctrl-D leaves, `/help` lists the
commands. Commands other apps register (`chats.slash_commands`, e.g. `/skills deploy`) are
answered here like on Telegram: printed, never stored in the history, no turn. `-m "text"`
sends one message, prints the reply and exits (status 1 if the turn failed); `-m "/skills"`
prints the command's answer and exits.
"""

import getpass
import logging
import sys
import threading
import time
import uuid

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from chats.agent.holds import chat_stop
from chats.agent.interrupts import request_interrupt
from chats.agent.llm import get_provider
from chats.agent.loop import run_claimed_turn
from chats.agent.turns import Claim, message_received, turn_claim
from chats.agent.waiting import wait_points
from chats.extras import DraftStream
from chats.models import Actor, Turn
from chats.selectors import chat_may_post
from chats.services import (
    IngestError,
    chat_get_or_create,
    chat_member_ensure,
    chat_reset,
    message_ingest,
    person_actor_id,
)
from chats.signals import turns_in_process
from chats.slash_commands import CommandContext, SlashCommand, slash_command, slash_commands
from chats.staged import staged_store

CLAIM_WAIT_SECONDS = 0.2
BUILTINS = {
    "new": "Start a fresh context (the history is kept)",
    "stop": "Stop the reply being written (or Ctrl-C)",
    "quit": "Leave (or Ctrl-D)",
    "help": "List the commands",
}


class Command(BaseCommand):
    help = "Chat with the agent from the terminal (channel cli, chat cli:<profile>)."

    def add_arguments(self, parser):
        parser.add_argument("-m", "--message", help="send one message, print the reply, exit")
        parser.add_argument(
            "--profile", default="default", help="the terminal chat to use (default: default)"
        )
        parser.add_argument(
            "--user", help="the dashboard username to speak as (links this terminal to them)"
        )
        parser.add_argument("--name", help="display name (default: your login name)")

    def handle(self, *args, message=None, profile="default", user=None, name=None, **options):
        if options.get("verbosity", 1) < 2:
            # Keep the terminal for the conversation: INFO logs only with -v 2.
            logging.getLogger().setLevel(logging.WARNING)
        self.person = None
        if user:
            self.person = get_user_model().objects.filter(username=user).first()
            if self.person is None:
                raise CommandError(f"no dashboard user named {user!r}")
        login = getpass.getuser()
        # A dashboard user speaks as their Person; a bare OS login lives in its own namespace
        # and is never linked, so no login name can pose as a person.
        self.user_id = person_actor_id(self.person) if self.person else login
        self.actor_namespace = "" if self.person else "os"
        self.display_name = name or (self.person.get_username() if self.person else login)
        self.profile = profile
        # What commands stage for the next message (e.g. /attach PATH), for this session.
        self.session: dict = {}
        try:
            self.chat, _ = chat_get_or_create(
                channel="cli", chat_id=profile, title=f"Terminal: {profile}"
            )
        except IngestError as exc:
            raise CommandError(str(exc)) from exc
        self.provider = get_provider()
        turns_in_process.send(sender=self.__class__, kind="cli")  # e.g. traces, when on
        notice = self.provider.info.notice
        if notice:
            self.stderr.write(notice)
        if message is not None:
            try:
                answered = self.answer_command(message.strip())
            except Exception as exc:  # noqa: BLE001 - shown as the command's failure
                raise CommandError(f"{message.strip()} failed: {exc}") from exc
            if answered is not None:
                return
            turn = self.send(message)
            if turn is not None and turn.status == Turn.Status.FAILED:
                sys.exit(1)
            return
        self.repl()

    # --- interactive ----------------------------------------------------------------------

    def repl(self) -> None:
        registered = " ".join(f"/{command.name}" for command in self.registered())
        self.stdout.write(
            f"Chat {self.chat.chat_key} as {self.display_name}. "
            "/new fresh context · /stop or Ctrl-C interrupts · /quit leaves · /help commands"
            + (f"\nAlso: {registered}" if registered else "")
        )
        while True:
            try:
                line = input("you> ")
            except EOFError:
                self.stdout.write("")
                return
            except KeyboardInterrupt:
                self.stdout.write("")
                continue
            text = line.strip()
            if not text:
                continue
            if text in ("/quit", "/exit"):
                return
            if text == "/new":
                chat_reset(chat=self.chat)
                self.stdout.write("Fresh context: earlier messages stay in the history.")
                continue
            if text == "/stop":
                stopped = chat_stop(
                    chat=self.chat,
                    reason="stopped from the terminal",
                    statuses=(Turn.Status.RUNNING, Turn.Status.WAITING),
                )
                self.stdout.write("Stopped." if stopped else "Nothing is running.")
                continue
            try:
                if self.answer_command(text) is not None:
                    continue
            except Exception as exc:  # noqa: BLE001 - one broken command must not end the chat
                self.stderr.write(f"{text.split()[0]} failed: {exc}")
                continue
            self.send(line)

    # --- commands -------------------------------------------------------------------------

    def registered(self) -> list[SlashCommand]:
        """Commands other apps registered, except names the terminal uses itself."""
        return [command for command in slash_commands("cli") if command.name not in BUILTINS]

    def help_text(self) -> str:
        lines = [f"/{name} – {text}" for name, text in BUILTINS.items()]
        lines += [f"/{command.name} – {command.help}" for command in self.registered()]
        return "Commands:\n" + "\n".join(lines)

    def answer_command(self, text: str) -> str | None:
        """Print the answer of /help or a registered command and return it; None when `text`
        is not one (it goes to the agent). A command is never stored in the history."""
        if not text.startswith("/"):
            return None
        name, _, args = text[1:].partition(" ")
        name = name.lower()
        if name == "help":
            answer = self.help_text()
        else:
            command = slash_command(name, "cli") if name not in BUILTINS else None
            if command is None:
                return None
            answer = command.handler(self.command_context(args.strip()))
        self.stdout.write(answer)
        return answer

    def command_context(self, args: str) -> CommandContext:
        actor = Actor.objects.filter(
            channel="cli", namespace=self.actor_namespace, external_id=self.user_id
        ).first()
        person = self.person if self.person is not None and self.person.is_active else None
        if person is not None:
            # Speaking here makes the person a member; a command does too, so that in a
            # brand-new terminal chat `/tools on …` finds them alone in their own chat.
            chat_member_ensure(chat=self.chat, person=person)
        # The answer is printed only on this terminal: private to whoever runs it.
        return CommandContext(
            channel="cli",
            chat=self.chat,
            actor=actor,
            person=person,
            args=args,
            is_private=True,
            session=self.session,
        )

    # --- one turn -------------------------------------------------------------------------

    def send(self, text: str) -> Turn | None:
        if self.person is not None:
            # The terminal's operator joins the person they speak as to this terminal chat
            # (as speaking always did); past that, the rule of every door applies.
            if self.person.is_active:
                chat_member_ensure(chat=self.chat, person=self.person)
            verdict = chat_may_post(self.person, self.chat)
            if not verdict:
                self.stderr.write(f"Not sent: {verdict.reason}")
                return None
        try:
            result = message_ingest(
                channel="cli",
                chat_id=self.profile,
                user_id=self.user_id,
                actor_namespace=self.actor_namespace,
                user_name=self.display_name,
                message_id=f"cli-{uuid.uuid4().hex}",
                text=text,
                person=self.person,
                member=self.person,
            )
        except IngestError as exc:
            self.stderr.write(f"Not sent: {exc}")
            return None
        if not result.duplicate:  # files staged with /attach, stored (and read) before the turn
            for line in staged_store(message=result.message, session=self.session):
                self.stdout.write(line)
        turn = message_received(result, enqueue=False)
        outcome: dict = {}
        worker = threading.Thread(target=self._run, args=(turn, outcome), daemon=True)
        worker.start()
        while worker.is_alive():
            try:
                worker.join(timeout=0.1)
            except KeyboardInterrupt:
                request_interrupt(turn.pk, "stopped from the terminal (Ctrl-C)")
        if "error" in outcome:
            raise outcome["error"]
        turn.refresh_from_db()
        if turn.status == Turn.Status.WAITING:
            return self.decide_waiting(turn)
        return turn

    # --- a call waiting for a decision ----------------------------------------------------

    def decide_waiting(self, turn: Turn) -> Turn:
        """The turn waits for a decision on a tool call: a decider at this terminal is
        asked y/N (a for always); anyone else is told where it can be decided. The turn
        goes on here once decided; left undecided (end of input), it waits for a decider
        on the dashboard or Telegram, and a worker continues it."""
        for waiting in wait_points():
            while turn.status == Turn.Status.WAITING:
                card = waiting.pending_card(turn)
                if card is None:
                    break
                self.stdout.write(waiting.describe(card))
                if not waiting.may_decide(self.chat, self.decider()):
                    self.stdout.write(
                        "Waiting for an owner or admin of this chat to decide "
                        "(on the dashboard or Telegram)."
                    )
                    return turn
                answer = self.ask("Run it? [y]es / [N]o / [a]lways allow here: ")
                if answer is None:
                    self.stdout.write("Left undecided: it can be decided on the dashboard.")
                    return turn
                approve = answer in ("y", "yes", "a", "always")
                always = answer in ("a", "always")
                result = waiting.decide(card, self.decider(), approve=approve, always=always)
                self.stdout.write(result)
                turn.refresh_from_db()
                if turn.status != Turn.Status.QUEUED:
                    return turn
                outcome: dict = {}
                self._run(turn, outcome)
                if "error" in outcome:
                    raise outcome["error"]
                turn.refresh_from_db()
        return turn

    def decider(self):
        return self.person if self.person is not None and self.person.is_active else None

    def ask(self, prompt: str) -> str | None:
        """One answer from the terminal, lowercased; None at the end of input."""
        try:
            return input(prompt).strip().lower()
        except EOFError:
            self.stdout.write("")
            return None

    def _run(self, turn: Turn, outcome: dict) -> None:
        from django.db import connections

        try:
            while True:
                claim = turn_claim(turn_id=turn.pk, worker=f"cli:{getpass.getuser()}")
                if claim.outcome is Claim.CLAIMED:
                    run_claimed_turn(claim.turn, provider=self.provider, on_event=self.show)
                    return
                if claim.outcome is Claim.GONE:
                    return
                time.sleep(CLAIM_WAIT_SECONDS)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
            outcome["error"] = exc
        finally:
            connections.close_all()

    draft: DraftStream | None = None

    def _draft(self) -> DraftStream:
        if self.draft is None:
            self.draft = DraftStream(self.chat.pk, self.person)
        return self.draft

    def show(self, event: dict) -> None:
        kind = event.get("type")
        out = self.stdout
        if kind == "turn.delta":
            # As this terminal's person reads it (knowledge's citations, say): the delta's
            # marks rendered, an unfinished one held until the next delta.
            out.write(self._draft().piece(event["text"]), ending="")
        elif self.draft is not None:
            out.write(self.draft.flush(), ending="")  # a tool step or the end: no mark
            if kind != "tool.started":
                self.draft = None
        if kind == "turn.started":
            out.write("agent> ", ending="")
        elif kind == "tool.started":
            out.write(f"\n  [tool {event['name']} …", ending="")
        elif kind == "tool.finished":
            state = "done" if event["ok"] else "error"
            out.write(f" {state}, {event['duration_ms']} ms]\n", ending="")
        elif kind == "turn.finished":
            out.write("")
        elif kind == "turn.waiting":
            out.write(f"\n  [waiting: {event['reason']}]")
        elif kind == "turn.interrupted":
            out.write(f"\n[interrupted: {event['reason']}]")
        elif kind == "turn.failed":
            out.write("")
            self.stderr.write(f"[failed] {event['error']}")
        out.flush()
