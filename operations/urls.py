"""The probe paths, for reverse(); requests to them are answered by ProbeMiddleware first."""

from django.urls import path

from operations import views

urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("metrics", views.metrics, name="metrics"),
]
