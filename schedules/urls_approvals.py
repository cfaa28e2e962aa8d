"""Schedule proposals on the Approvals page: decide one."""

from django.urls import path

from schedules import approval_views

urlpatterns = [
    path(
        "schedules/proposals/<int:schedule_id>/decide",
        approval_views.schedule_proposal_decide,
        name="schedule_proposal_decide",
    ),
]
