from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path(
        "accounts/password/",
        auth_views.PasswordChangeView.as_view(),
        name="password_change",
    ),
    path(
        "accounts/password/done/",
        auth_views.PasswordChangeDoneView.as_view(),
        name="password_change_done",
    ),
    path("api/v1/", include("attachments.api_urls")),
    path("api/v1/", include("chats.api.urls")),
    path("v1/", include("openai_api.urls")),
    path("settings/", include("openai_api.urls_keys")),
    path("memory/", include("memory.urls")),
    path("skills/", include("skills.urls")),
    path("skills/", include("skills.urls_reviews")),
    path("telegram/", include("bots.urls")),
    path("", include("learning.urls")),
    path("", include("knowledge.urls")),
    path("", include("toolservers.urls")),
    path("", include("toolservers.urls_approvals")),
    path("", include("operations.urls")),
    path("", include("schedules.urls")),
    path("", include("schedules.urls_approvals")),
    path("", include("usage.urls")),
    path("", include("attachments.urls")),
    path("", include("chats.urls")),
]
