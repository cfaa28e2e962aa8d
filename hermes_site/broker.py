"""The Celery broker transport: kombu's Redis transport with one fix, so that a Redis
restart while a turn runs does not end the worker (docs/RELIABILITY.md, issue #11 item 8).

What goes wrong without it (celery 5.7.0, kombu 5.7.0, redis-py 8.1): when the consumer
loses the broker connection it calls `Connection.collect()`, which closes what it can and
detaches the transport (`transport.client = None`), and since celery 5.7.0 it then also
calls `Connection.close()`. That closes the consumer's channel a second time (the first
close stopped early: its pending BRPOP raised the connection error), and closing a channel
restores its unacknowledged messages, which needs a Redis client. kombu's channel rebuilds
its connection pool from `self.connection.client`, which is now None, and raises
`AttributeError: 'NoneType' object has no attribute 'hostname'`. Celery only ignores
connection errors there, so the AttributeError is "Unrecoverable" and the worker exits.
It happens whenever a task with late acknowledgement (every turn) is running when the
connection drops. Acknowledging a task through such a channel takes the same path.

The fix: a channel whose transport was detached says so with a connection error, which is
what it is. Celery then treats it like any lost connection: ignored while closing, logged
("Couldn't ack") for an acknowledgement, and the consumer reconnects. An acknowledgement
that could not be sent leaves the message in Redis's unacked set; kombu delivers it again
after the visibility timeout, and `run_turn` does nothing for a turn that already ran.
"""

from kombu.transport import redis as kombu_redis
from redis.exceptions import ConnectionError as RedisConnectionError


class DetachedChannelError(RedisConnectionError):
    """The channel belongs to a broker connection that was closed after a connection loss."""


class Channel(kombu_redis.Channel):
    def _connparams(self, asynchronous=False):
        transport = self.connection
        if transport is None or transport.client is None:
            raise DetachedChannelError(
                "this broker channel was closed after a lost connection; "
                "the consumer reconnects with a new one"
            )
        return super()._connparams(asynchronous=asynchronous)


class Transport(kombu_redis.Transport):
    """kombu's Redis transport whose channels fail with a connection error, not an
    AttributeError, once their connection was collected."""

    Channel = Channel
