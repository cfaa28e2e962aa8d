import pytest
from django.db import IntegrityError, connection

from knowledge.models import Collection

pytestmark = pytest.mark.django_db


def test_a_team_default_is_only_for_a_collection_everyone_may_read():
    with pytest.raises(IntegrityError):
        Collection.objects.create(name="Runbooks", team_default=True, everyone_may_read=False)


def test_the_passage_index_exists_on_this_database():
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("SELECT name FROM sqlite_master WHERE name = 'knowledge_passage_fts'")
            assert cursor.fetchone() is not None
        else:
            cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
            assert cursor.fetchone() is not None
