"""Import chat history from JSON Lines written by export_chat (or a folder or tar archive
written by its --bundle, with the messages' files); idempotent by message id."""

import os
import sys
import tarfile

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from chats.history_bundle import BundleError, bundle_for_reading
from chats.jsonl import history_import


class Command(BaseCommand):
    help = (
        "Store the records of a JSON Lines file (or - for stdin) through message ingestion. "
        "Messages already stored are counted as duplicates and left alone; a bad line is "
        "reported with its number and skipped, or with --strict aborts the whole import."
    )
    stealth_options = ("stdin",)

    def add_arguments(self, parser):
        parser.add_argument(
            "file",
            help="a .jsonl file written by export_chat, - for stdin, or a folder or .tar "
            "archive written by export_chat --bundle",
        )
        parser.add_argument(
            "--strict",
            action="store_true",
            help="store nothing at all if any line is bad (one transaction)",
        )

    def handle(self, *args, file: str, strict: bool, **options):
        try:
            if file == "-":
                stdin = options.get("stdin") or sys.stdin
                # Read bytes where there are bytes: every line is decoded as UTF-8 on its own.
                report = history_import(lines=getattr(stdin, "buffer", stdin), strict=strict)
            elif os.path.isdir(file) or tarfile.is_tarfile(file):
                bundle, open_history = bundle_for_reading(file)
                try:
                    with open_history() as stream:
                        report = history_import(lines=stream, strict=strict, bundle=bundle)
                finally:
                    close = getattr(bundle, "close", None)
                    if close is not None:
                        close()
            else:
                with open(file, "rb") as stream:
                    report = history_import(lines=stream, strict=strict)
        except BundleError as exc:
            raise CommandError(f"cannot read {file}: {exc}") from exc
        except OSError as exc:
            raise CommandError(f"cannot read {file}: {exc.strerror or exc}") from exc
        except DatabaseError as exc:
            raise CommandError(f"the database refused the import: {exc}") from exc

        for error in report.errors:
            self.stderr.write(str(error))
        if report.error_count > len(report.errors):
            self.stderr.write(f"... and {report.error_count - len(report.errors)} more bad lines")
        if report.aborted:
            raise CommandError(report.summary())
        self.stdout.write(report.summary())
