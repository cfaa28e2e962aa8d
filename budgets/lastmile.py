"""The last mile of a cap: near it, the turns it caps call the model one at a time.

The budget check reads committed spend and takes no lock, and a running turn's tokens reach
the ledger only when the turn is stored. Far from a cap that costs nothing; near it, two
turns that start together would both pass and both spend. So within the last
`BUDGET_LAST_MILE_PERCENT` of a cap (10 % by default), a turn must hold the cap's **last-mile
claim** to call the model: a Redis key naming the turn, taken atomically (`SET NX`),
renewed at each of the turn's checks and given up when the turn's spend is stored (it ends
or waits for a decision). A turn that finds the claim held by another is refused at once
with an answer saying so (the person's message is stored, as for any refusal); when the
holder's spend is stored, the next check sees it. So concurrent turns overshoot a cap by at
most the one turn that holds its last mile — provided the turns already running when the
spend enters the last mile spend less than its margin together (docs/BUDGETS.md).

A claim also expires on its own (`CLAIM_SECONDS` after its last renewal) so that a turn that
died without storing anything cannot hold a cap. Redis down: the claim is skipped (logged
once by `hermes_site.redis.guarded`) and the bound is the check's own, one model call per
running turn.
"""

from datetime import date

from django.conf import settings

from hermes_site.redis import guarded

# Longer than any model call or tool call between two checks of one turn; renewed at each.
CLAIM_SECONDS = 600

# KEYS[1] the claim, KEYS[2] the turn's set of claims; ARGV[1] the turn id, ARGV[2] seconds.
# Take the claim if free, renew it if the turn holds it; 1 if the turn holds it now.
_CLAIM = """
local holder = redis.call('GET', KEYS[1])
if holder == false or holder == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'EX', tonumber(ARGV[2]))
  redis.call('SADD', KEYS[2], KEYS[1])
  redis.call('EXPIRE', KEYS[2], tonumber(ARGV[2]))
  return 1
end
return 0
"""

# KEYS[1] the turn's set of claims; ARGV[1] the turn id. Delete the claims the turn still
# holds (one that expired and was taken by another turn is left alone).
_RELEASE = """
local claims = redis.call('SMEMBERS', KEYS[1])
for _, key in ipairs(claims) do
  if redis.call('GET', key) == ARGV[1] then
    redis.call('DEL', key)
  end
end
redis.call('DEL', KEYS[1])
return #claims
"""


def margin_percent() -> int:
    return settings.BUDGET_LAST_MILE_PERCENT


def in_last_mile(cap: int, used: int) -> bool:
    """Whether `used` (the month's spend plus the turn's unrecorded spend, in the cap's own
    unit: tokens or nanos) is within the last mile of `cap`."""
    percent = margin_percent()
    if percent <= 0 or cap <= 0:
        return False
    return used * 100 >= cap * (100 - percent)


def claim_key(budget_id: int, subject: int | None, month: date) -> str:
    """The claim of one budget for one month; `subject` is the person for the default budget
    (it caps each person separately), else None."""
    who = "-" if subject is None else str(subject)
    return f"{settings.REDIS_KEY_PREFIX}:budget:lastmile:{budget_id}:{who}:{month:%Y-%m}"


def _turn_key(turn_id: int) -> str:
    return f"{settings.REDIS_KEY_PREFIX}:budget:lastmile-turn:{turn_id}"


def claim(key: str, turn_id: int) -> bool:
    """Take or renew the claim for `turn_id`; False when another turn holds it. True when
    Redis is unreachable (the claim degrades to the check's own bound)."""

    def operation(client) -> bool:
        script = client.register_script(_CLAIM)
        return bool(script(keys=[key, _turn_key(turn_id)], args=[turn_id, CLAIM_SECONDS]))

    return guarded(operation, default=True, what="budget last-mile claim")


def release(turn_id: int) -> None:
    """Give up every claim the turn holds (its spend is stored now)."""

    def operation(client) -> None:
        client.register_script(_RELEASE)(keys=[_turn_key(turn_id)], args=[turn_id])

    guarded(operation, default=None, what="budget last-mile release")


def holder(key: str) -> int | None:
    """The turn holding the claim, if any (for tests and the admin's curiosity)."""

    def operation(client) -> int | None:
        value = client.get(key)
        return int(value) if value else None

    return guarded(operation, default=None, what="budget last-mile holder")
