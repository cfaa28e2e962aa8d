"""manage.py import_skills DIR: load a folder of SKILL.md skills (flat or category/name)."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from skills.models import Via
from skills.services import Author, skill_import
from skills.transfer import read_skill_folders


class Command(BaseCommand):
    help = (
        "Import skills from DIR/<name>/SKILL.md or DIR/<category>/<name>/SKILL.md with their "
        "references/, templates/, scripts/, assets/ files. Validated and scanned like any "
        "write; a skill whose content is unchanged (same hash) stores nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument("directory")

    def handle(self, *args, directory: str, **options):
        """Import every skill folder under DIRECTORY; fails (exit 1) if any was refused."""
        root = Path(directory)
        if not root.is_dir():
            raise CommandError(f"{root} is not a directory")
        folders = read_skill_folders(root)
        if not folders:
            raise CommandError(f"no SKILL.md found in {root} or its sub-folders")
        author = Author(via=Via.COMMAND, reason=f"import_skills {root}")
        counts: dict[str, int] = {}
        for folder in folders:
            label = f"{folder.category}/{folder.slug}" if folder.category else folder.slug
            for skipped in folder.skipped:
                self.stderr.write(f"{label}: skipped {skipped}")
            if folder.error:
                code, message = "invalid", f"Error: {folder.error}"
            else:
                outcome = skill_import(
                    name=folder.slug,
                    content=folder.skill_md,
                    files=folder.files,
                    category=folder.category,
                    author=author,
                )
                code, message = outcome.code, outcome.message
            counts[code] = counts.get(code, 0) + 1
            stream = self.stdout if code in ("applied", "unchanged") else self.stderr
            stream.write(f"{label}: {code}: {message}")
        summary = ", ".join(f"{n} {code}" for code, n in sorted(counts.items()))
        refused = sum(n for code, n in counts.items() if code not in ("applied", "unchanged"))
        if refused:
            raise CommandError(f"{len(folders)} skills read: {summary}")
        self.stdout.write(f"{len(folders)} skills read: {summary}")
