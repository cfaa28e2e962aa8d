"""manage.py import_skills DIR: load every SKILL.md folder under DIR, at any depth."""

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from skills.models import Via
from skills.services import Author, skill_import
from skills.transfer import discover, finding_lines, read_skill

APPLIED, UNCHANGED, REFUSED = "applied", "unchanged", "refused"


class Command(BaseCommand):
    help = (
        "Import every folder holding a SKILL.md under DIR (any depth; the category is the "
        "path between DIR and the folder, hidden folders left out) with all its files, text "
        "and binary. Validated and scanned like any write; unchanged content stores nothing. "
        "Prints one line per skill and a summary; exits non-zero only if a skill was refused."
    )

    def add_arguments(self, parser):
        parser.add_argument("directory")
        parser.add_argument(
            "--dry-run", action="store_true", help="say what would happen; store nothing"
        )
        parser.add_argument(
            "--json", action="store_true", dest="as_json", help="print a JSON report"
        )
        parser.add_argument(
            "--replace",
            action="store_true",
            help="let a folder replace a same-name skill that came from elsewhere",
        )

    def handle(self, *args, directory: str, dry_run: bool, as_json: bool, replace: bool, **options):
        """Import every skill folder under DIRECTORY; one report line per skill (applied,
        unchanged, refused with every finding), exit 1 only if one was refused."""
        root = Path(directory)
        if not root.is_dir():
            raise CommandError(f"{root} is not a directory")
        found = discover(root)
        if not found.skills:
            raise CommandError(f"no SKILL.md found in {root} or its sub-folders")
        author = Author(via=Via.COMMAND, reason=f"import_skills {root}")
        origin_root = str(root.resolve())
        entries, names = [], {}
        for skill in found.skills:
            read_skill(skill)
            label = skill.path if skill.path != "." else skill.slug
            entry = {
                "name": skill.slug,
                "path": label,
                "category": skill.category,
                "skipped": [{"path": path, "why": why} for path, why in skill.skipped],
                "findings": [],
            }
            if skill.slug in names:
                entry.update(
                    code="duplicate",
                    message=f"Error: the name {skill.slug!r} is already taken by "
                    f"{names[skill.slug]} in this import; rename one of the folders.",
                )
            elif skill.error:
                entry.update(code="invalid", message=f"Error: {skill.error}")
            else:
                outcome = skill_import(
                    name=skill.slug,
                    content=skill.skill_md,
                    files=skill.files,
                    binaries=skill.binaries,
                    category=skill.category,
                    author=author,
                    origin={"via": Via.COMMAND, "root": origin_root, "path": skill.path},
                    replace=replace,
                    dry_run=dry_run,
                )
                entry.update(code=outcome.code, message=outcome.message)
                if outcome.version is not None and outcome.code in (APPLIED, UNCHANGED):
                    entry["version"] = outcome.version.number
                if outcome.code == "blocked":
                    entry["findings"] = finding_lines(skill, outcome)
            names.setdefault(skill.slug, label)
            entry["status"] = entry["code"] if entry["code"] in (APPLIED, UNCHANGED) else REFUSED
            skill.files = skill.binaries = {}  # the next skill's bytes replace these
            entries.append(entry)
        summary = {
            "read": len(entries),
            **{s: sum(e["status"] == s for e in entries) for s in (APPLIED, UNCHANGED, REFUSED)},
        }
        if as_json:
            report = {
                "root": origin_root,
                "dry_run": dry_run,
                "skipped": [{"path": p, "why": why} for p, why in found.skipped],
                "skills": entries,
                "summary": summary,
            }
            self.stdout.write(_dumps(report))
        else:
            self._write_lines(found.skipped, entries, dry_run)
        refusals = [entry["code"] for entry in entries if entry["status"] == REFUSED]
        line = _summary_line(summary, dry_run, refusals)
        if summary[REFUSED]:
            raise CommandError(line)
        if not as_json:
            self.stdout.write(line)

    def _write_lines(self, skipped, entries, dry_run: bool) -> None:
        for path, why in skipped:
            self.stdout.write(f"{path}: skipped, {why}")
        for entry in entries:
            label = entry["path"]
            for item in entry["skipped"]:
                self.stdout.write(f"{label}/{item['path']}: skipped, {item['why']}")
            if entry["status"] == APPLIED:
                verb = "would apply" if dry_run else "applied"
                self.stdout.write(f"{label}: {verb}, version {entry.get('version', '?')}")
            elif entry["status"] == UNCHANGED:
                self.stdout.write(f"{label}: unchanged, version {entry.get('version', '?')}")
            elif entry["findings"]:
                self.stderr.write(
                    f"{label}: refused ({entry['code']}) — {len(entry['findings'])} findings:"
                )
                for f in entry["findings"]:
                    if f["line"] is None:
                        self.stderr.write(f"  {label}/{f['file']}: {f['reason']}")
                        continue
                    self.stderr.write(
                        f"  {label}/{f['file']}:{f['line']} {f['category']}: {f['reason']}"
                        f" — {f['excerpt']}"
                    )
            else:
                self.stderr.write(f"{label}: refused ({entry['code']}) — {entry['message']}")


def _dumps(report: dict) -> str:
    return json.dumps(report, ensure_ascii=False, indent=2)


def _summary_line(summary: dict, dry_run: bool, refusals: list[str]) -> str:
    parts = [
        f"{summary[key]} {'would apply' if key == APPLIED and dry_run else key}"
        for key in (APPLIED, UNCHANGED, REFUSED)
        if summary[key]
    ]
    if refusals:
        why = ", ".join(f"{refusals.count(code)} {code}" for code in sorted(set(refusals)))
        parts[-1] += f" ({why})"
    noun = "skill" if summary["read"] == 1 else "skills"
    line = f"{summary['read']} {noun} read: {', '.join(parts)}"
    return line + ("; dry run: nothing was stored" if dry_run else "")
