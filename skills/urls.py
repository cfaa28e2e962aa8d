"""The skills dashboard pages: the library, one skill, its diffs and reviewer actions.

Mounted at /skills/ next to `skills.urls_reviews` (the approvals side, which owns
`proposals/…`); nothing here uses the segments `proposals` or `decide` under a skill.
"""

from django.urls import path

from skills import views, views_actions

urlpatterns = [
    path("", views.library_page, name="skills_library"),
    path("<str:slug>/", views.skill_page, name="skill_page"),
    path("<str:slug>/raw", views.skill_raw, name="skill_raw"),
    path("<str:slug>/file", views.skill_file, name="skill_file"),
    path("<str:slug>/diff", views.skill_diff, name="skill_diff"),
    path("<str:slug>/rollback", views_actions.skill_rollback_view, name="skill_rollback"),
    path("<str:slug>/pin", views_actions.skill_pin_view, name="skill_pin"),
    path("<str:slug>/status", views_actions.skill_status_view, name="skill_status"),
    path("<str:slug>/promote", views_actions.skill_promote_view, name="skill_promote"),
]
