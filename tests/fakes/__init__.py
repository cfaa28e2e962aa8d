"""Fakes of external services as real servers on loopback speaking the real protocol."""
