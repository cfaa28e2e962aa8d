"""Skill proposals on the approvals page: decide one, bound to the version shown."""

urlpatterns = []
