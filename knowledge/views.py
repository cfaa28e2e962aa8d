"""The Knowledge pages of the dashboard (docs/KNOWLEDGE.md#pages).

- `/knowledge/`: the collections the person may read, with their documents' count and
  their last sync; maintainers also see readers and maintainers.
- `/knowledge/<id>/`: a collection's documents with their state and reason, its recent
  syncs, search within it (the hub's search syntax), and for maintainers the upload of files
  or a whole folder and its readers.
- `/knowledge/<id>/doc/<id>`: a document's passages; a citation's link ends in `#K<passage>`
  and that passage is highlighted (CSS :target) and scrolled to.
- `/chats/<key>/knowledge`: the collections on in a chat; its deciders who may read a
  collection turn it on or off there (knowledge.services enforces who and where).

Every read goes through knowledge.access: a collection the person may not read answers 404
whether or not it exists; a maintainer's form posted by anyone else answers 403.
"""

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Count, Max
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.html import format_html
from django.views.decorators.http import require_GET, require_POST

from attachments.models import Attachment
from chats.selectors import chat_for_person, chat_role
from knowledge.access import (
    DECIDER_ROLES,
    chat_may_use,
    collections_on,
    collections_readable_by,
    may_maintain,
)
from knowledge.chat_files import attachment_add
from knowledge.models import ChatCollection, Collection, Document, Passage, SyncRun
from knowledge.page_search import PageSearchError, search_collection
from knowledge.services import (
    collection_add_readers,
    collection_remove_readers,
    collection_turn_off,
    collection_turn_on,
)
from knowledge.uploads import upload_store

MAX_DOCUMENTS_SHOWN = 1000
RECENT_SYNCS = 5


def _readable_or_404(request: HttpRequest, collection_id: int) -> Collection:
    collection = collections_readable_by(request.user).filter(pk=collection_id).first()
    if collection is None:
        raise Http404("No such collection.")
    return collection


def _maintained_or_403(request: HttpRequest, collection_id: int) -> Collection:
    collection = _readable_or_404(request, collection_id)
    if not may_maintain(request.user, collection):
        raise PermissionDenied("Only a maintainer of this collection changes it.")
    return collection


def _last_syncs(collection_ids) -> dict[int, SyncRun]:
    latest = (
        SyncRun.objects.filter(collection_id__in=collection_ids)
        .values("collection_id")
        .annotate(last=Max("id"))
        .values_list("last", flat=True)
    )
    return {run.collection_id: run for run in SyncRun.objects.filter(pk__in=list(latest))}


@login_required
@require_GET
def knowledge_page(request: HttpRequest) -> HttpResponse:
    collections = list(
        collections_readable_by(request.user)
        .annotate(document_count=Count("documents", distinct=True))
        .order_by("name")
    )
    syncs = _last_syncs([c.pk for c in collections])
    for collection in collections:
        collection.last_sync = syncs.get(collection.pk)
        collection.maintained = may_maintain(request.user, collection)
    return render(request, "knowledge/index.html", {"collections": collections})


@login_required
@require_GET
def collection_page(request: HttpRequest, collection_id: int) -> HttpResponse:
    collection = _readable_or_404(request, collection_id)
    documents = list(collection.documents.order_by("path")[:MAX_DOCUMENTS_SHOWN])
    states = dict(
        collection.documents.values("state").annotate(n=Count("id")).values_list("state", "n")
    )
    query = request.GET.get("q", "").strip()
    results, search_error = [], ""
    if query:
        try:
            results = search_collection(request.user, collection, query)
        except PageSearchError as exc:
            search_error = str(exc)
    maintained = may_maintain(request.user, collection)
    context = {
        "collection": collection,
        "documents": documents,
        "document_total": sum(states.values()),
        "states": states,
        "syncs": list(collection.syncs.order_by("-id")[:RECENT_SYNCS]),
        "query": query,
        "results": results,
        "search_error": search_error,
        "maintained": maintained,
    }
    if maintained:
        context.update(
            readers=list(collection.readers.order_by("username")),
            maintainers=list(collection.maintainers.order_by("username")),
        )
    return render(request, "knowledge/collection.html", context)


@login_required
@require_GET
def document_page(request: HttpRequest, collection_id: int, document_id: int) -> HttpResponse:
    collection = _readable_or_404(request, collection_id)
    document = get_object_or_404(Document, pk=document_id, collection=collection)
    passages = list(Passage.objects.filter(document=document).order_by("ordinal"))
    return render(
        request,
        "knowledge/document.html",
        {"collection": collection, "document": document, "passages": passages},
    )


@login_required
@require_POST
def upload(request: HttpRequest, collection_id: int) -> HttpResponse:
    collection = _maintained_or_403(request, collection_id)
    files = request.FILES.getlist("files")
    paths = request.POST.getlist("paths")
    try:
        staged = upload_store(collection=collection, files=files, paths=paths, by=request.user)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        note = f"{staged.count} file{'s' if staged.count != 1 else ''} received; indexing."
        if staged.refused:
            note += " Left out: " + "; ".join(staged.refused[:5])
        messages.success(request, note)
    url = reverse("knowledge_collection", args=[collection.pk])
    if request.headers.get("X-Requested-With") == "fetch":
        # knowledge.js posted it (to keep a folder's paths): it goes to the page itself, so
        # the notice is read there and not by a redirect fetch() would follow.
        return JsonResponse({"url": url})
    return redirect(url)


@login_required
@require_POST
def readers_change(request: HttpRequest, collection_id: int) -> HttpResponse:
    collection = _maintained_or_403(request, collection_id)
    username = request.POST.get("username", "").strip()
    person = get_user_model().objects.filter(username=username, is_active=True).first()
    if person is None:
        messages.error(request, f"There is no active person called {username!r}.")
    elif request.POST.get("action") == "remove":
        collection_remove_readers(collection=collection, people=[person], by=request.user)
        messages.success(request, f"{username} no longer reads {collection.name}.")
    else:
        collection_add_readers(collection=collection, people=[person], by=request.user)
        messages.success(request, f"{username} reads {collection.name}.")
    return redirect("knowledge_collection", collection.pk)


@login_required
@require_POST
def add_file(request: HttpRequest) -> HttpResponse:
    """The control under a chat's file: add it to a collection the person maintains. A file
    of a chat the person does not read answers 404."""
    try:
        attachment_id = int(request.POST.get("attachment", ""))
        collection_id = int(request.POST.get("collection", ""))
    except ValueError:
        raise Http404("No such file.") from None
    attachment = Attachment.objects.select_related("message__chat").filter(pk=attachment_id).first()
    if (
        attachment is None
        or chat_for_person(request.user, attachment.message.chat.chat_key) is None
    ):
        raise Http404("No such file.")
    collection = _maintained_or_403(request, collection_id)
    try:
        document = attachment_add(attachment=attachment, collection=collection, by=request.user)
    except PermissionDenied as exc:
        note, ok = str(exc), False
    else:
        note, ok = f"{attachment.name} goes into {collection.name} as {document.path}.", True
    if request.htmx:
        return HttpResponse(
            format_html('<p class="{}" role="status">{}</p>', "notice" if ok else "error", note),
            status=200 if ok else 403,
        )
    (messages.success if ok else messages.error)(request, note)
    chat = attachment.message.chat
    return redirect(
        reverse("chat_page", args=[chat.chat_key]) + f"#message-{attachment.message_id}"
    )


@login_required
@require_GET
def chat_knowledge_page(request: HttpRequest, chat_key: str) -> HttpResponse:
    """The collections on in a chat, and (for its deciders) the ones they may turn on."""
    chat = chat_for_person(request.user, chat_key)
    if chat is None:
        raise Http404("No such chat.")
    readable = {c.pk for c in collections_readable_by(request.user)}
    on = collections_on(chat)
    rows = []
    for collection in on:
        verdict = chat_may_use(chat, collection)
        rows.append(
            {
                "collection": collection,
                "on": True,
                "readable": collection.pk in readable,
                "used": bool(verdict),
                "reason": verdict.reason,
                "default": collection.team_default
                and not ChatCollection.objects.filter(chat=chat, collection=collection).exists(),
            }
        )
    decider = chat_role(request.user, chat) in DECIDER_ROLES
    if decider:
        on_ids = {c.pk for c in on}
        for collection in (
            collections_readable_by(request.user).exclude(pk__in=on_ids).order_by("name")
        ):
            verdict = chat_may_use(chat, collection)
            rows.append(
                {
                    "collection": collection,
                    "on": False,
                    "readable": True,
                    "used": bool(verdict),
                    "reason": verdict.reason,
                }
            )
    return render(request, "knowledge/chat.html", {"chat": chat, "rows": rows, "decider": decider})


@login_required
@require_POST
def chat_knowledge_set(request: HttpRequest, chat_key: str) -> HttpResponse:
    chat = chat_for_person(request.user, chat_key)
    if chat is None:
        raise Http404("No such chat.")
    try:
        collection_id = int(request.POST.get("collection", ""))
    except ValueError:
        raise Http404("No such collection.") from None
    turning_on = request.POST.get("on") == "1"
    # A collection the person may not read (on) or that is not on here (off) is not theirs
    # to name: 404 whether or not it exists.
    candidates = (
        collections_readable_by(request.user)
        if turning_on
        else Collection.objects.filter(pk__in=[c.pk for c in collections_on(chat)])
    )
    collection = candidates.filter(pk=collection_id).first()
    if collection is None:
        raise Http404("No such collection.")
    try:
        if turning_on:
            collection_turn_on(collection=collection, chat=chat, by=request.user)
            messages.success(request, f"{collection.name} is on in this chat.")
        else:
            collection_turn_off(collection=collection, chat=chat, by=request.user)
            messages.success(request, f"{collection.name} is off in this chat.")
    except PermissionDenied as exc:
        messages.error(request, str(exc))
        return render(
            request,
            "knowledge/refused.html",
            {"chat": chat, "reason": str(exc)},
            status=403,
        )
    return redirect("chat_knowledge", chat.chat_key)
