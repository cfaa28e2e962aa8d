from django.urls import path

from memory import views

urlpatterns = [
    path("approvals/", views.approvals_page, name="memory_approvals"),
    path("approvals/decide", views.proposals_decide, name="memory_decide_selected"),
    path("approvals/<int:entry_id>/decide", views.proposal_decide, name="memory_decide"),
    path("mine/", views.my_memory_page, name="memory_mine"),
    path("mine/<int:entry_id>/delete", views.my_memory_delete, name="memory_delete"),
]
