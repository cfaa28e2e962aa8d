"""Audio seconds in the usage ledger and money caps before a paid transcription.

Placeholder until the usage unit lands: records nothing, refuses nothing."""


def paid_refusal(attachment, seconds: float) -> str:
    return ""


def record(attachment, *, engine: str, seconds: float) -> None:
    return None
