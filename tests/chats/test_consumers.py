"""The dashboard's WebSocket for one chat, through the real ASGI application (origin check,
session auth, routing) and real Redis (replay buffer, channel layer)."""

from urllib.parse import quote

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.test import Client

from chats import consumers
from chats.agent import events
from chats.models import ChatMember
from chats.services import chat_get_or_create, chat_member_ensure, chat_member_remove
from hermes_site.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)

ORIGIN = b"http://localhost"
TIMEOUT = 3


def run(coroutine_function):
    """Run an async test body on an event loop (pytest-asyncio is not installed)."""
    return async_to_sync(coroutine_function)()


def session_headers(person=None, origin: bytes = ORIGIN) -> list[tuple[bytes, bytes]]:
    headers = [(b"origin", origin)]
    if person is not None:
        client = Client()
        client.force_login(person)
        headers.append((b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()))
    return headers


def socket(chat_key: str, headers, after: int | str | None = None) -> WebsocketCommunicator:
    # Encoded as a browser's encodeURIComponent would; the server hands the route decoded text.
    path = f"/ws/chats/{quote(chat_key, safe='')}/"
    if after is not None:
        path += f"?after={after}"
    return WebsocketCommunicator(application, path, headers=headers)


async def publish(chat_id: int, event_type: str, **data) -> dict:
    event = await sync_to_async(events.publish)(chat_id, event_type, **data)
    assert event is not None, "Redis must be reachable for these tests"
    return event


async def receive_events(communicator: WebsocketCommunicator, count: int) -> list[dict]:
    return [await communicator.receive_json_from(timeout=TIMEOUT) for _ in range(count)]


async def close_code(communicator: WebsocketCommunicator) -> int:
    """The code a refused socket ends with, whether refused at the handshake or just after."""
    connected, code = await communicator.connect(timeout=TIMEOUT)
    if connected:
        message = await communicator.receive_output(timeout=TIMEOUT)
        assert message["type"] == "websocket.close"
        code = message["code"]
    await communicator.disconnect()
    return code


def test_member_receives_events_published_after_connecting(member, team_chat):
    headers = session_headers(member)

    async def body():
        communicator = socket(team_chat.chat_key, headers)
        connected, _ = await communicator.connect(timeout=TIMEOUT)
        assert connected
        started = await publish(team_chat.pk, "turn.started", turn_id=7, model="m")
        delta = await publish(team_chat.pk, "turn.delta", turn_id=7, text="héllo")
        assert await receive_events(communicator, 2) == [started, delta]
        assert delta["text"] == "héllo" and delta["seq"] == started["seq"] + 1
        assert await communicator.receive_nothing(timeout=0.3)
        layer = get_channel_layer()
        group_key = layer._group_key(events.chat_group_name(team_chat.pk))
        async with layer.connection(layer.consistent_hash(group_key)) as connection:
            assert await connection.zcard(group_key) == 1
            await communicator.disconnect()
            assert await connection.zcard(group_key) == 0  # left the group

    run(body)


def test_an_idle_socket_outlives_the_channel_layers_blocking_pop(member, team_chat):
    """channels_redis blocks 5 s per receive; a Redis socket timeout of the same length once
    turned every idle minute into a crashed consumer and a reconnect."""
    headers = session_headers(member)

    async def body():
        communicator = socket(team_chat.chat_key, headers)
        assert (await communicator.connect(timeout=TIMEOUT))[0]
        assert await communicator.receive_nothing(timeout=7, interval=0.5)
        event = await publish(team_chat.pk, "turn.delta", text="still here")
        assert await receive_events(communicator, 1) == [event]
        await communicator.disconnect()

    run(body)


def test_without_after_nothing_old_is_sent(owner, team_chat):
    headers = session_headers(owner)

    async def body():
        await publish(team_chat.pk, "turn.delta", text="old")
        communicator = socket(team_chat.chat_key, headers)
        assert (await communicator.connect(timeout=TIMEOUT))[0]
        assert await communicator.receive_nothing(timeout=0.3)
        new = await publish(team_chat.pk, "turn.delta", text="new")
        assert await receive_events(communicator, 1) == [new]
        await communicator.disconnect()

    run(body)


def test_after_replays_missed_events_once_in_order_then_live_ones(member, team_chat):
    headers = session_headers(member)

    async def body():
        seen = await publish(team_chat.pk, "turn.started", turn_id=1)
        missed = [await publish(team_chat.pk, "turn.delta", turn_id=1, text=text) for text in "ab"]
        communicator = socket(team_chat.chat_key, headers, after=seen["seq"])
        assert (await communicator.connect(timeout=TIMEOUT))[0]
        assert await receive_events(communicator, 2) == missed
        live = await publish(team_chat.pk, "turn.finished", turn_id=1, message=None)
        assert await receive_events(communicator, 1) == [live]
        assert await communicator.receive_nothing(timeout=0.3)
        await communicator.disconnect()

    run(body)


def test_after_zero_replays_everything_in_the_buffer(member, team_chat):
    headers = session_headers(member)

    async def body():
        published = [await publish(team_chat.pk, "turn.delta", text=str(i)) for i in range(3)]
        communicator = socket(team_chat.chat_key, headers, after=0)
        assert (await communicator.connect(timeout=TIMEOUT))[0]
        assert await receive_events(communicator, 3) == published
        assert await communicator.receive_nothing(timeout=0.3)
        await communicator.disconnect()

    run(body)


def test_event_both_replayed_and_live_is_sent_once(member, team_chat, monkeypatch):
    """Published while the socket reads the buffer: one event lands in both the buffer and the
    live stream (sent once), the next only in the live stream (still sent: the socket
    subscribed before it read)."""
    headers = session_headers(member)
    read_buffer = consumers._events_since
    racing = []

    async def read_while_publishing(chat_id, after_seq):
        if racing:
            return await read_buffer(chat_id, after_seq)
        racing.append(await publish(chat_id, "turn.delta", text="in buffer and live"))
        recorded = await read_buffer(chat_id, after_seq)
        racing.append(await publish(chat_id, "turn.delta", text="live only"))
        return recorded

    monkeypatch.setattr(consumers, "_events_since", read_while_publishing)

    async def body():
        before = await publish(team_chat.pk, "turn.started", turn_id=2)
        communicator = socket(team_chat.chat_key, headers, after=0)
        assert (await communicator.connect(timeout=TIMEOUT))[0]
        assert await receive_events(communicator, 3) == [before, *racing]
        later = await publish(team_chat.pk, "turn.delta", text="later")
        assert await receive_events(communicator, 1) == [later]
        assert await communicator.receive_nothing(timeout=0.3)
        await communicator.disconnect()

    run(body)


def test_a_gap_in_live_events_is_filled_from_the_buffer(member, team_chat, monkeypatch):
    headers = session_headers(member)

    async def body():
        communicator = socket(team_chat.chat_key, headers)
        assert (await communicator.connect(timeout=TIMEOUT))[0]
        # Recorded but never broadcast, as when the channel layer dropped them.
        with monkeypatch.context() as patch:
            patch.setattr(events, "_group_send", lambda group, message: None)
            dropped = [await publish(team_chat.pk, "turn.delta", text=t) for t in "xy"]
        live = await publish(team_chat.pk, "turn.delta", text="z")
        assert await receive_events(communicator, 3) == [*dropped, live]
        assert await communicator.receive_nothing(timeout=0.3)
        await communicator.disconnect()

    run(body)


def test_duplicate_live_delivery_is_dropped(member, team_chat):
    headers = session_headers(member)

    async def body():
        communicator = socket(team_chat.chat_key, headers)
        assert (await communicator.connect(timeout=TIMEOUT))[0]
        event = await publish(team_chat.pk, "turn.delta", text="once")
        await get_channel_layer().group_send(
            events.chat_group_name(team_chat.pk),
            {"type": events.CHANNEL_MESSAGE_TYPE, "event": event},
        )
        assert await receive_events(communicator, 1) == [event]
        assert await communicator.receive_nothing(timeout=0.3)
        await communicator.disconnect()

    run(body)


def test_chat_key_with_colon_and_percent_in_its_id(member):
    chat, _ = chat_get_or_create(channel="web", chat_id="ops:50%/night")
    chat_member_ensure(chat=chat, person=member)
    assert "%3A" in chat.chat_key and "%25" in chat.chat_key
    headers = session_headers(member)

    async def body():
        communicator = socket(chat.chat_key, headers)
        assert (await communicator.connect(timeout=TIMEOUT))[0]
        event = await publish(chat.pk, "turn.delta", text="ok")
        assert await receive_events(communicator, 1) == [event]
        await communicator.disconnect()

    run(body)


def test_ping_answers_pong_with_the_newest_seq(member, team_chat, monkeypatch, settings):
    settings.WS_PING_CATCH_UP_SECONDS = 0  # every ping looks (the interval is tested below)
    headers = session_headers(member)

    async def body():
        communicator = socket(team_chat.chat_key, headers)
        assert (await communicator.connect(timeout=TIMEOUT))[0]
        await communicator.send_json_to({"type": "ping"})
        assert await communicator.receive_json_from(timeout=TIMEOUT) == {
            "type": "pong",
            "last_seq": 0,
        }
        first = await publish(team_chat.pk, "turn.delta", text="1")
        assert await receive_events(communicator, 1) == [first]
        # An event that never arrived live is sent before the pong, so the pong means
        # "you have everything up to last_seq".
        with monkeypatch.context() as patch:
            patch.setattr(events, "_group_send", lambda group, message: None)
            unseen = await publish(team_chat.pk, "turn.delta", text="2")
        await communicator.send_json_to({"type": "ping"})
        assert await receive_events(communicator, 2) == [
            unseen,
            {"type": "pong", "last_seq": unseen["seq"]},
        ]
        # Malformed frames and unknown messages are ignored; the socket stays usable.
        await communicator.send_to(text_data="not json")
        await communicator.send_json_to({"type": "subscribe"})
        await communicator.send_json_to(["ping"])
        await communicator.send_json_to({"type": "ping"})
        assert await communicator.receive_json_from(timeout=TIMEOUT) == {
            "type": "pong",
            "last_seq": unseen["seq"],
        }
        await communicator.disconnect()

    run(body)


def test_outsider_and_unknown_chat_are_refused_alike(outsider, member, team_chat):
    outsider_headers = session_headers(outsider)
    member_headers = session_headers(member)

    async def body():
        not_member = await close_code(socket(team_chat.chat_key, outsider_headers))
        unknown = await close_code(socket("web:no-such-room", member_headers))
        assert not_member == unknown == consumers.CLOSE_NOT_FOUND

    run(body)


def test_outsider_receives_nothing_of_the_chat(outsider, team_chat):
    headers = session_headers(outsider)

    async def body():
        communicator = socket(team_chat.chat_key, headers, after=0)
        await publish(team_chat.pk, "turn.delta", text="secret")
        assert (await communicator.connect(timeout=TIMEOUT))[0]
        message = await communicator.receive_output(timeout=TIMEOUT)
        assert message == {"type": "websocket.close", "code": consumers.CLOSE_NOT_FOUND}
        await publish(team_chat.pk, "turn.delta", text="secret too")
        assert await communicator.receive_nothing(timeout=0.3)
        await communicator.disconnect()

    run(body)


def test_anonymous_is_refused(team_chat):
    headers = session_headers(None)

    async def body():
        assert await close_code(socket(team_chat.chat_key, headers)) == (
            consumers.CLOSE_UNAUTHENTICATED
        )

    run(body)


def test_deactivated_person_is_refused(member, team_chat):
    headers = session_headers(member)
    member.is_active = False
    member.save(update_fields=["is_active"])

    async def body():
        # The session no longer authenticates anybody.
        code = await close_code(socket(team_chat.chat_key, headers))
        assert code == consumers.CLOSE_UNAUTHENTICATED

    run(body)


def test_a_removed_member_is_disconnected_at_once_and_the_others_stay(owner, member, team_chat):
    owner_headers, member_headers = session_headers(owner), session_headers(member)

    async def body():
        owners_socket = socket(team_chat.chat_key, owner_headers)
        members_socket = socket(team_chat.chat_key, member_headers)
        assert (await owners_socket.connect(timeout=TIMEOUT))[0]
        assert (await members_socket.connect(timeout=TIMEOUT))[0]

        await sync_to_async(chat_member_remove)(
            chat=team_chat, person_id=member.pk, by_role=ChatMember.Role.OWNER
        )
        closed = await members_socket.receive_output(timeout=TIMEOUT)
        assert closed == {"type": "websocket.close", "code": consumers.CLOSE_NOT_FOUND}

        after = await publish(team_chat.pk, "turn.delta", text="not for marco any more")
        assert await receive_events(owners_socket, 1) == [after]
        assert await members_socket.receive_nothing(timeout=0.3)
        await owners_socket.disconnect()
        await members_socket.disconnect()

    run(body)


def test_a_person_deactivated_while_connected_is_disconnected(owner, member, team_chat):
    headers = session_headers(member)

    async def body():
        communicator = socket(team_chat.chat_key, headers)
        assert (await communicator.connect(timeout=TIMEOUT))[0]
        member.is_active = False
        await sync_to_async(member.save)(update_fields=["is_active"])
        closed = await communicator.receive_output(timeout=TIMEOUT)
        assert closed == {"type": "websocket.close", "code": consumers.CLOSE_NOT_FOUND}
        await communicator.disconnect()

    run(body)


def test_an_access_change_of_someone_else_leaves_a_socket_open(owner, member, team_chat):
    headers = session_headers(owner)

    async def body():
        communicator = socket(team_chat.chat_key, headers)
        assert (await communicator.connect(timeout=TIMEOUT))[0]
        await sync_to_async(events.announce_access_change)(team_chat.pk)
        assert await communicator.receive_nothing(timeout=0.5)
        event = await publish(team_chat.pk, "turn.delta", text="still here")
        assert await receive_events(communicator, 1) == [event]
        await communicator.disconnect()

    run(body)


@pytest.mark.parametrize("origin", [b"http://evil.example", b"null"])
def test_foreign_origin_is_refused_at_the_handshake(member, team_chat, origin):
    headers = session_headers(member, origin=origin)

    async def body():
        connected, _ = await socket(team_chat.chat_key, headers).connect(timeout=TIMEOUT)
        assert not connected

    run(body)


@pytest.mark.parametrize("after", ["-1", "abc", "1.5"])
def test_invalid_after_is_refused(member, team_chat, after):
    headers = session_headers(member)

    async def body():
        code = await close_code(socket(team_chat.chat_key, headers, after=after))
        assert code == consumers.CLOSE_BAD_REQUEST

    run(body)


# --- abuse: pings, frame floods, ended sessions ---------------------------------------------


def test_a_ping_with_nothing_missing_does_not_read_the_replay_buffer(
    member, team_chat, monkeypatch
):
    """A ping used to re-read and decode the whole replay buffer (2,000 events): flooding
    sockets slowed everybody down. With nothing missing it only compares numbers."""
    headers = session_headers(member)
    reads = []
    read_buffer = consumers._events_since

    async def counting(chat_id, after_seq):
        reads.append(after_seq)
        return await read_buffer(chat_id, after_seq)

    monkeypatch.setattr(consumers, "_events_since", counting)

    async def body():
        for i in range(30):
            await publish(team_chat.pk, "turn.delta", text=str(i))
        communicator = socket(team_chat.chat_key, headers)
        assert (await communicator.connect(timeout=TIMEOUT))[0]
        live = await publish(team_chat.pk, "turn.delta", text="live")
        assert await receive_events(communicator, 1) == [live]
        reads.clear()
        for _ in range(5):
            await communicator.send_json_to({"type": "ping"})
            pong = await communicator.receive_json_from(timeout=TIMEOUT)
            assert pong == {"type": "pong", "last_seq": live["seq"]}
        assert reads == []
        await communicator.disconnect()

    run(body)


def test_the_replay_buffer_decodes_only_the_missing_tail(team_chat, monkeypatch):
    for i in range(200):
        events.publish(team_chat.pk, "turn.delta", text=str(i))
    newest = events.last_seq(team_chat.pk)
    decoded = []
    real_loads = events.json.loads

    def counting_loads(raw, *args, **kwargs):
        decoded.append(raw)
        return real_loads(raw, *args, **kwargs)

    monkeypatch.setattr(events.json, "loads", counting_loads)
    tail = events.events_since(team_chat.pk, newest - 3)
    assert [e["seq"] for e in tail] == [newest - 2, newest - 1, newest]
    assert [e["text"] for e in tail] == ["197", "198", "199"]
    assert len(decoded) <= 4  # not the 200 events of the buffer


def test_a_socket_flooding_frames_is_closed_with_the_rate_limit_code(member, team_chat, settings):
    settings.WS_FRAME_BURST = 20
    settings.WS_FRAMES_PER_SECOND = 1
    headers = session_headers(member)

    async def body():
        communicator = socket(team_chat.chat_key, headers)
        assert (await communicator.connect(timeout=TIMEOUT))[0]
        for _ in range(60):
            await communicator.send_to(text_data='{"type": "subscribe"}')
        output = await communicator.receive_output(timeout=TIMEOUT)
        assert output == {"type": "websocket.close", "code": consumers.CLOSE_RATE_LIMITED}
        await communicator.disconnect()

    run(body)


def test_a_socket_within_its_frame_allowance_stays_open(member, team_chat, settings):
    settings.WS_FRAME_BURST = 20
    settings.WS_FRAMES_PER_SECOND = 1
    headers = session_headers(member)

    async def body():
        communicator = socket(team_chat.chat_key, headers)
        assert (await communicator.connect(timeout=TIMEOUT))[0]
        for _ in range(10):
            await communicator.send_json_to({"type": "ping"})
            assert (await communicator.receive_json_from(timeout=TIMEOUT))["type"] == "pong"
        event = await publish(team_chat.pk, "turn.delta", text="still open")
        assert await receive_events(communicator, 1) == [event]
        await communicator.disconnect()

    run(body)


def logged_in_client(person) -> Client:
    """A browser that logged in through the login form (a real session, real auth hash)."""
    client = Client()
    response = client.post(
        "/accounts/login/", {"username": person.username, "password": f"pw-{person.username}-123!"}
    )
    assert response.status_code == 302, response.content[:300]
    return client


def cookie_headers(client: Client) -> list[tuple[bytes, bytes]]:
    return [
        (b"origin", ORIGIN),
        (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()),
    ]


def test_logging_out_closes_that_sessions_sockets_and_not_the_other_browsers(member, team_chat):
    laptop, phone = logged_in_client(member), logged_in_client(member)
    laptop_headers, phone_headers = cookie_headers(laptop), cookie_headers(phone)

    async def body():
        laptop_socket = socket(team_chat.chat_key, laptop_headers)
        phone_socket = socket(team_chat.chat_key, phone_headers)
        assert (await laptop_socket.connect(timeout=TIMEOUT))[0]
        assert (await phone_socket.connect(timeout=TIMEOUT))[0]
        response = await sync_to_async(laptop.post)("/accounts/logout/")
        assert response.status_code == 302
        closed = await laptop_socket.receive_output(timeout=TIMEOUT)
        assert closed == {"type": "websocket.close", "code": consumers.CLOSE_UNAUTHENTICATED}
        event = await publish(team_chat.pk, "turn.delta", text="only the phone reads this")
        assert await receive_events(phone_socket, 1) == [event]
        assert await laptop_socket.receive_nothing(timeout=0.3)
        await laptop_socket.disconnect()
        await phone_socket.disconnect()

    run(body)


def test_a_password_change_closes_the_persons_other_sessions_sockets(member, owner, team_chat):
    laptop, phone = logged_in_client(member), logged_in_client(member)
    phone_headers = cookie_headers(phone)
    owner_headers = session_headers(owner)

    async def body():
        phone_socket = socket(team_chat.chat_key, phone_headers)
        owners_socket = socket(team_chat.chat_key, owner_headers)
        assert (await phone_socket.connect(timeout=TIMEOUT))[0]
        assert (await owners_socket.connect(timeout=TIMEOUT))[0]
        response = await sync_to_async(laptop.post)(
            "/accounts/password/",
            {
                "old_password": "pw-marco-123!",
                "new_password1": "a-new-long-passphrase-42",
                "new_password2": "a-new-long-passphrase-42",
            },
        )
        assert response.status_code == 302
        closed = await phone_socket.receive_output(timeout=TIMEOUT)
        assert closed == {"type": "websocket.close", "code": consumers.CLOSE_UNAUTHENTICATED}
        # The laptop stays logged in and can open a socket again; other people are untouched.
        again = socket(team_chat.chat_key, cookie_headers(laptop))
        assert (await again.connect(timeout=TIMEOUT))[0]
        event = await publish(team_chat.pk, "turn.delta", text="after the change")
        assert await receive_events(again, 1) == [event]
        assert await receive_events(owners_socket, 1) == [event]
        await again.disconnect()
        await owners_socket.disconnect()
        await phone_socket.disconnect()

    run(body)


def test_a_ping_catches_up_at_most_once_per_interval(member, team_chat, monkeypatch, settings):
    settings.WS_PING_CATCH_UP_SECONDS = 3600
    headers = session_headers(member)

    async def body():
        communicator = socket(team_chat.chat_key, headers)
        assert (await communicator.connect(timeout=TIMEOUT))[0]
        with monkeypatch.context() as patch:  # recorded, never broadcast
            patch.setattr(events, "_group_send", lambda group, message: None)
            first = await publish(team_chat.pk, "turn.delta", text="1")
            await communicator.send_json_to({"type": "ping"})
            assert await receive_events(communicator, 2) == [
                first,
                {"type": "pong", "last_seq": first["seq"]},
            ]
            await publish(team_chat.pk, "turn.delta", text="2")
            await communicator.send_json_to({"type": "ping"})
            # Within the interval: no second read; the pong says what this socket has.
            assert await communicator.receive_json_from(timeout=TIMEOUT) == {
                "type": "pong",
                "last_seq": first["seq"],
            }
        await communicator.disconnect()

    run(body)


def test_a_password_set_anywhere_else_closes_every_session_of_that_person(member, team_chat):
    """The admin's password form, `manage.py changepassword` and scripts save the person."""
    headers = cookie_headers(logged_in_client(member))

    async def body():
        communicator = socket(team_chat.chat_key, headers)
        assert (await communicator.connect(timeout=TIMEOUT))[0]
        # A save that changes nothing else leaves the socket open...
        await sync_to_async(member.save)()
        assert await communicator.receive_nothing(timeout=0.5)
        member.set_password("set-by-an-admin-77")
        await sync_to_async(member.save)()
        closed = await communicator.receive_output(timeout=TIMEOUT)
        assert closed == {"type": "websocket.close", "code": consumers.CLOSE_UNAUTHENTICATED}
        await communicator.disconnect()

    run(body)
