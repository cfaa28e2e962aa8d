from django.urls import path

from knowledge import views

# Mounted before chats.urls: `chats/<key>/knowledge` ends in no `/`, so it never shadows the
# chat page (whose pattern matches keys ending in `/`).
urlpatterns = [
    path("knowledge/", views.knowledge_page, name="knowledge"),
    path("knowledge/<int:collection_id>/", views.collection_page, name="knowledge_collection"),
    path(
        "knowledge/<int:collection_id>/doc/<int:document_id>",
        views.document_page,
        name="knowledge_document",
    ),
    path("knowledge/<int:collection_id>/readers", views.readers_change, name="knowledge_readers"),
    path("knowledge/upload/<int:collection_id>", views.upload, name="knowledge_upload"),
    path("knowledge/add-file", views.add_file, name="knowledge_add_file"),
    path("chats/<path:chat_key>/knowledge", views.chat_knowledge_page, name="chat_knowledge"),
    path(
        "chats/<path:chat_key>/knowledge/set", views.chat_knowledge_set, name="chat_knowledge_set"
    ),
]
