from django.urls import path

from toolservers import approval_views

# Mounted before chats.urls: the chat page's pattern only matches keys ending in `/`, and no
# chats endpoint ends in `/approvals`, `/approvals/<id>`, `/approvals/<id>/arguments` or
# `/approvals/<id>/decide`.
urlpatterns = [
    path("chats/<path:chat_key>/approvals", approval_views.chat_approvals, name="chat_approvals"),
    path(
        "chats/<path:chat_key>/approvals/<int:approval_id>",
        approval_views.approval_card_view,
        name="approval_card",
    ),
    path(
        "chats/<path:chat_key>/approvals/<int:approval_id>/arguments",
        approval_views.approval_arguments,
        name="approval_arguments",
    ),
    path(
        "chats/<path:chat_key>/approvals/<int:approval_id>/decide",
        approval_views.approval_decide_view,
        name="approval_decide",
    ),
]
