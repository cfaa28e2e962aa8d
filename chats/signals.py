"""Notifications other apps may listen to. They announce what already happened (after
commit); they never carry a state change of their own."""

from django.dispatch import Signal

# Sent after an Actor was linked to a Person (or moved to another one): `actor`, `person`,
# `previous_person` (None when the actor had no Person before).
actor_linked = Signal()
