"""Helpers shared by the skills tests."""

from skills.format import render_skill_md

BODY = """# Deploy to staging

1. Build the image:
    make image
2. Ship it:
    deploy --env "staging" --wait
3. Check the health page.
"""


def skill_md(
    name: str = "deploy-staging",
    description: str = "How to deploy to staging.",
    body: str = BODY,
    **extra,
) -> str:
    """A valid SKILL.md."""
    return render_skill_md(name=name, description=description, body=body, extra=extra)
