"""The Celery app: the broker is REDIS_URL, configuration comes from Django settings."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hermes_site.settings")

app = Celery("hermes_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
