"""The usage pages: tokens and cost per day, person, chat, model or kind over a range of
UTC days, with a chart, a CSV of the table shown, and the drill-down to the records.

Who sees what is `usage.selectors.usage_scope`: staff everything, a person their own spend
and the whole spend of the chats they own. Filters only narrow that scope: asking for
another person or a chat one does not own shows what the scope allows of it (nothing, for
an outsider), and names (a person's, a chat's) are shown only from rows in scope. The CSV
is the table, row for row, under the same rule."""

from urllib.parse import urlencode

from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.html import escape, format_html_join
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_GET

from chats.models import ChatMember
from hermes_site.spreadsheets import csv_writer
from usage.forms import UsageFilterForm
from usage.models import NOT_PRICED, Kind
from usage.selectors import (
    GROUPINGS,
    TABLE_ROWS,
    Spend,
    UsageFilter,
    chat_label,
    spend_sum,
    usage_models,
    usage_people,
    usage_records,
    usage_series,
    usage_table,
)

TEMPLATE = "usage/usage.html"
RECORDS_PER_PAGE = 50
FILTER_FIELDS = ("start", "end", "person", "chat", "model", "kind")


def cost_text(spend: Spend, currency: str = "") -> str:
    """The cost as the table and the CSV show it: unknown is never shown as zero."""
    suffix = f" {currency}" if currency else ""
    if spend.cost is not None:
        if spend.tokens == 0 and spend.cost_nanos == 0:
            return "—"  # no model tokens (tool calls): nothing to price
        return f"{spend.cost:.6f}{suffix}"
    if spend.cost_nanos:
        return f"≥ {spend.priced_cost:.6f}{suffix} + unknown"
    return "unknown"


def _params(form: UsageFilterForm) -> dict:
    data = form.cleaned_data
    params = {}
    for name in FILTER_FIELDS:
        value = data.get(name)
        if value not in (None, ""):
            params[name] = value.isoformat() if hasattr(value, "isoformat") else str(value)
    return params


def _url(name: str, params: dict, **changes) -> str:
    return _link(reverse(name), params, changes)


def _link(path: str, params: dict, changes: dict) -> str:
    merged = {**params, **{k: v for k, v in changes.items() if v is not None}}
    return f"{path}?{urlencode(merged)}"


def _table_body(rows, by: str, params: dict, currency: str) -> str:
    """The table's rows as HTML, built in Python: a year by day is 365 rows of seven
    cells and two links, which the template language renders several times slower (the
    page would spend most of its time there). Every value is escaped, as the template
    language escapes it."""
    page, records = reverse("usage"), reverse("usage_records")
    html = []
    for row in rows:
        narrow = _narrow(by, row.key)
        if by == "day":
            narrow_url = _link(page, params, {"by": "kind", **narrow})
        else:
            narrow_url = _link(page, params, {"by": "day", **narrow})
        first, *numbers, cost = (escape(cell) for cell in _cells(row, currency))
        unknown = ' class="unknown"' if row.spend.cost is None else ""
        html.append(
            f'      <tr><th scope="row"><a href="{escape(narrow_url)}">{first}</a></th>'
            + "".join(f"<td>{number}</td>" for number in numbers)
            + f'<td{unknown}>{cost}</td><td><a href="{escape(_link(records, params, narrow))}">'
            "records</a></td></tr>\n"
        )
    return mark_safe("".join(html))  # every part escaped above


def _narrow(by: str, key: str) -> dict:
    """The filter that narrows the page to one row of a breakdown."""
    if by == "day":
        return {"start": key, "end": key}
    if by == "person":
        return {"person": key or "0"}
    return {by: key}


def _filter_labels(viewer, where: UsageFilter) -> list[str]:
    """What the page is narrowed to, in words; names only where the viewer may see them."""
    labels = []
    if where.person_id == 0:
        labels.append("person: (no person)")
    elif where.person_id is not None:
        person = get_user_model().objects.filter(pk=where.person_id).first()
        if person is not None and (viewer.is_staff or person.pk == viewer.pk):
            labels.append(f"person: {person.get_username()}")
        else:
            labels.append(f"person #{where.person_id}")
    if where.chat_id is not None:
        member = ChatMember.objects.filter(chat_id=where.chat_id, person=viewer).select_related(
            "chat"
        )
        found = member.first()
        labels.append(f"chat: {chat_label(found.chat)}" if found else f"chat #{where.chat_id}")
    if where.model is not None:
        labels.append(f"model: {where.model}")
    if where.kind is not None:
        labels.append(
            f"kind: {Kind(where.kind).label if where.kind in Kind.values else where.kind}"
        )
    return labels


def _options(choices: list[tuple[str, str]], selected: str) -> str:
    """<option>s built in Python: a long list (every person, for staff) renders in a
    fraction of what the template language takes for it."""
    return format_html_join(
        "",
        '<option value="{}"{}>{}</option>',
        ((value, " selected" if value == selected else "", label) for value, label in choices),
    )


def _csv(rows, by: str, currency: str) -> HttpResponse:
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="usage-by-{by}.csv"'
    writer = csv_writer(response)  # no cell becomes a formula in a spreadsheet
    writer.writerow(_HEADERS[by])
    for row in rows:
        writer.writerow(_cells(row, currency))
    return response


_HEADERS = {
    by: [by, "calls", "prompt tokens", "completion tokens", "total tokens", "audio seconds", "cost"]
    for by in GROUPINGS
}


def _cells(row, currency: str) -> list[str]:
    """One table row's cells, exactly as the page shows them (the CSV writes the same)."""
    spend = row.spend
    return [
        row.label,
        f"{spend.calls}",
        f"{spend.prompt_tokens}",
        f"{spend.completion_tokens}",
        f"{spend.tokens}",
        f"{spend.audio_seconds}",
        cost_text(spend, currency),
    ]


@login_required
@require_GET
def usage_page(request: HttpRequest) -> HttpResponse:
    """Usage over a range: totals, the chart of each day, one breakdown table (or its CSV)."""
    from django.conf import settings

    form = UsageFilterForm(request.GET)
    if not form.is_valid():
        return render(request, TEMPLATE, {"form": form, "groupings": GROUPINGS}, status=400)
    where = form.usage_filter()
    by = form.cleaned_data["by"]
    currency = settings.USAGE_CURRENCY
    rows, groups = usage_table(request.user, where, by)
    if request.GET.get("format") == "csv":
        return _csv(rows, by, currency)
    params = _params(form)
    # The series by day covers the whole range: the totals are its sum (one query fewer).
    series = usage_series(request.user, where, rows if by == "day" else None)
    total = spend_sum(series)
    chart = {
        "currency": currency,
        "days": [day.key for day in series],
        "prompt": [day.spend.prompt_tokens for day in series],
        "completion": [day.spend.completion_tokens for day in series],
        # null where a day's cost is unknown in part: the line breaks, never drops to zero
        "cost": [None if day.spend.cost is None else float(day.spend.cost) for day in series],
    }
    context = {
        "form": form,
        "by": by,
        "groupings": [(g, _url("usage", params, by=g), g == by) for g in GROUPINGS],
        "headers": _HEADERS[by],
        "table": _table_body(rows, by, params, currency),
        "groups": groups,
        "table_cut": groups > len(rows),
        "table_rows": TABLE_ROWS,
        "total": total,
        "total_cost": cost_text(total, currency),
        "chart": chart,
        "csv_url": _url("usage", params, by=by, format="csv"),
        "records_url": _url("usage_records", params),
        "filters": _filter_labels(request.user, where),
        "clear_url": _url("usage", {"start": params["start"], "end": params["end"]}, by=by),
        "model_options": _options(
            [("", "every model")] + [(m, m) for m in usage_models(request.user, where)],
            where.model or "",
        ),
        "person_options": _options(
            [("", "everyone"), ("0", "(no person)")]
            + [(str(p.pk), p.get_username()) for p in usage_people(request.user)],
            "" if where.person_id is None else str(where.person_id),
        )
        if request.user.is_staff
        else "",
        "currency": currency,
        "start": where.start,
        "end": where.end,
    }
    return render(request, TEMPLATE, context)


@login_required
@require_GET
def usage_records_page(request: HttpRequest) -> HttpResponse:
    """The drill-down: the records behind the figures, newest first, 50 a page, each with
    its turn (and a link to the turn's context where the viewer reads the chat)."""
    from django.conf import settings

    form = UsageFilterForm(request.GET)
    if not form.is_valid():
        return render(request, "usage/records.html", {"form": form}, status=400)
    where = form.usage_filter()
    try:
        page = max(1, int(request.GET.get("page", "1")))
    except ValueError:
        page = 1
    offset = (page - 1) * RECORDS_PER_PAGE
    records = list(
        usage_records(request.user, where).select_related("turn")[
            offset : offset + RECORDS_PER_PAGE + 1
        ]
    )
    more = len(records) > RECORDS_PER_PAGE
    records = records[:RECORDS_PER_PAGE]
    readable = set(
        ChatMember.objects.filter(
            person=request.user, chat_id__in={r.chat_id for r in records if r.chat_id}
        ).values_list("chat_id", flat=True)
    )
    currency = settings.USAGE_CURRENCY
    params = _params(form)
    rows = []
    for record in records:
        turn = record.turn
        context_url = None
        if turn is not None and turn.reply_id and record.chat_id in readable:
            context_url = reverse("message_context", args=[record.chat.chat_key, turn.reply_id])
        spend = Spend(
            calls=record.calls,
            prompt_tokens=record.prompt_tokens,
            completion_tokens=record.completion_tokens,
            cost_nanos=record.cost_nanos or 0,
            unpriced_tokens=0
            if record.cost_nanos is not None
            else record.prompt_tokens + record.completion_tokens,
            unpriced_calls=0
            if record.cost_nanos is not None or record.kind in NOT_PRICED
            else record.calls,
        )
        rows.append(
            {
                "record": record,
                "kind": Kind(record.kind).label if record.kind in Kind.values else record.kind,
                "person": record.person.get_username() if record.person else "(no person)",
                "chat": chat_label(record.chat) if record.chat else "(no chat)",
                "cost": cost_text(spend, currency),
                "context_url": context_url,
            }
        )
    context = {
        "form": form,
        "rows": rows,
        "page": page,
        "previous_url": _url("usage_records", params, page=page - 1) if page > 1 else None,
        "next_url": _url("usage_records", params, page=page + 1) if more else None,
        "back_url": _url("usage", params),
        "filters": _filter_labels(request.user, where),
    }
    return render(request, "usage/records.html", context)
