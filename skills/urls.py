"""The skills dashboard pages: the library, one skill, its diffs and reviewer actions."""

urlpatterns = []
