"""manage.py export_skills DIR: write every skill as DIR/[category/]name/ with all its files."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from skills.selectors import skills_listing
from skills.transfer import export_folders, write_skill_folder


class Command(BaseCommand):
    help = (
        "Export the current version of every skill (archived ones with --include-archived) "
        "to DIR/<category path>/<name>/ with its text and binary files, byte for byte, in "
        "the Agent Skills layout. DIR must be empty or not exist yet."
    )

    def add_arguments(self, parser):
        parser.add_argument("directory")
        parser.add_argument("--include-archived", action="store_true")

    def handle(self, *args, directory: str, include_archived: bool, **options):
        """Write every listed skill into an empty DIRECTORY; byte for byte what is stored,
        in folders that import_skills reads back as the same skills."""
        root = Path(directory)
        if root.exists() and (not root.is_dir() or any(root.iterdir())):
            raise CommandError(f"{root} exists and is not an empty directory")
        root.mkdir(parents=True, exist_ok=True)
        skills = list(skills_listing(include_archived=include_archived))
        folders = export_folders(skills)
        for skill in skills:
            folder = write_skill_folder(root, skill, folders[skill.pk])
            self.stdout.write(f"{skill.slug} v{skill.current_version.number} -> {folder}")
        self.stdout.write(f"{len(skills)} skills exported to {root}")
