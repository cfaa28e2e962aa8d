"""Skill proposals on the approvals page: decide one, bound to the version shown."""

from django.urls import path

from skills import views_reviews

urlpatterns = [
    path(
        "proposals/<int:proposal_id>/decide",
        views_reviews.proposal_decide,
        name="skill_proposal_decide",
    ),
    path("proposals/<int:proposal_id>/raw", views_reviews.proposal_raw, name="skill_proposal_raw"),
]
