"""Who may decide a proposal, and when a person's own request approves it at once."""

import re

from django.conf import settings

from chats.models import Actor, ChatMember
from memory.models import MemoryBook, Scope

APPROVAL_CHOICES = {
    Scope.USER: ("subject", "auto"),
    Scope.TEAM: ("staff", "auto"),
    Scope.CHAT: ("chat_admin", "auto"),
}


def approval_policy(scope: str) -> str:
    """The configured policy of `scope` (validated at startup by a system check)."""
    return {
        Scope.USER: settings.MEMORY_APPROVAL_USER,
        Scope.TEAM: settings.MEMORY_APPROVAL_TEAM,
        Scope.CHAT: settings.MEMORY_APPROVAL_CHAT,
    }[scope]


def _is_staff(person) -> bool:
    return bool(person and person.is_active and (person.is_staff or person.is_superuser))


def book_is_about(book: MemoryBook, *, person=None, actor: Actor | None = None) -> bool:
    """True if `book` is the user book of this person, or of this actor (or its Person)."""
    if book.scope != Scope.USER:
        return False
    if actor is not None and person is None:
        person = actor.person
    if book.person_id is not None:
        return person is not None and person.pk == book.person_id
    if actor is not None and actor.pk == book.actor_id:
        return True
    # An actor book whose actor has meanwhile been linked belongs to that Person.
    return person is not None and book.actor.person_id == person.pk


def may_review(book: MemoryBook, *, person=None, actor: Actor | None = None) -> bool:
    """May this person (or this channel actor) approve, reject or remove entries of `book`?

    User books: only the person they are about. Team: staff. Chat: staff, or an owner or
    admin of that chat. A deactivated person decides nothing."""
    if person is None and actor is not None:
        person = actor.person
    if person is not None and not person.is_active:
        return False
    if book.scope == Scope.USER:
        return book_is_about(book, person=person, actor=actor)
    if person is None:
        return False
    if _is_staff(person):
        return True
    if book.scope == Scope.CHAT:
        return ChatMember.objects.filter(
            chat_id=book.chat_id,
            person=person,
            role__in=[ChatMember.Role.OWNER, ChatMember.Role.ADMIN],
        ).exists()
    return False


# "Remember …", "don't forget …", "记住…" — and not "no need to remember", "别记住".
_REMEMBER = re.compile(
    r"(?<!not )(?<!n't )(?<!never )(?<!no need to )"
    r"\b(?:remember|memori[sz]e|keep in mind|make a note|take note|note (?:that|down)|"
    r"save (?:this|that|it)|(?:don't|do not|never) forget|for future reference)\b"
    r"|(?<![别不])记住|(?<![别不])记下|(?<![别不])记一下|别忘|不要忘",
    re.IGNORECASE,
)
_FORGET = re.compile(
    r"(?<!don't )(?<!do not )(?<!never )\bforget\b|\bstop remembering\b|"
    r"\b(?:remove|delete|erase|drop)\b[^.!?\n]{0,40}\b(?:memory|memories|remember)\b"
    r"|(?<![别不])忘掉|(?<![别不])忘记|别记|不要记|删掉|删除",
    re.IGNORECASE,
)
_UPDATE = re.compile(
    r"\b(?:update|change|correct|actually)\b|更新|改成|改为|其实",
    re.IGNORECASE,
)


def asked_to_remember(text: str) -> bool:
    """Did this message explicitly ask the agent to remember something?"""
    return bool(_REMEMBER.search(text or ""))


def asked_to_forget(text: str) -> bool:
    """Did this message explicitly ask the agent to forget something?"""
    return bool(_FORGET.search(text or ""))


def asked_for(change: str, text: str) -> bool:
    """Does `text` mention this kind of change at all (add, replace, remove)? A loose hint,
    never enough to approve anything: see `explicit_request`."""
    if change == "add":
        return asked_to_remember(text)
    if change == "replace":
        return asked_to_remember(text) or bool(_UPDATE.search(text or ""))
    return asked_to_forget(text)


# --- the subject's own explicit request ---------------------------------------------------

# A request is a statement, not a question: "do you remember…", "can you remember…?".
_QUESTION_LEAD = re.compile(
    r"\b(?:do|does|did|can|could|would|will|won't|should|shall|may|might|have|has)\s+"
    r"(?:you|u|i|we|hermes)\b[^.!?\n]*$|(?:你|您)?(?:还)?记得|能不能|可不可以|是否",
    re.IGNORECASE,
)
# Any negation before the keyword in its sentence ("I don't want you to remember…"): a
# request that is not plainly positive is not one (it then simply waits for review).
_NEGATION = re.compile(
    r"\b(?:don't|don’t|do not|dont|never|no|not|stop|without|can't|cannot|won't|shouldn't)\b"
    r"|[别不没]",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"[.!?。！？;；\n]")
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
# Words that carry no fact: "I", "my", "that", "the user"... A fact's own words must come
# from the subject's message; these may be added by the model when it rephrases.
_FILLER = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "of",
        "to",
        "in",
        "on",
        "at",
        "for",
        "with",
        "from",
        "by",
        "as",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "am",
        "i",
        "me",
        "my",
        "mine",
        "myself",
        "you",
        "your",
        "he",
        "she",
        "they",
        "them",
        "their",
        "his",
        "her",
        "it",
        "its",
        "we",
        "our",
        "us",
        "this",
        "that",
        "these",
        "those",
        "there",
        "here",
        "who",
        "whom",
        "which",
        "what",
        "when",
        "where",
        "user",
        "person",
        "people",
        "has",
        "have",
        "had",
        "does",
        "do",
        "did",
        "will",
        "would",
        "should",
        "can",
        "could",
        "also",
        "always",
        "usually",
        "often",
        "now",
        "currently",
        "very",
        "really",
        "just",
        "please",
        "remember",
        "note",
    ]
)
MATCH_SHARE = 0.8  # share of the fact's own words that the subject must have said


def explicit_request_sentence(text: str) -> str | None:
    """The sentence in which `text` explicitly asks to remember something ("remember that I
    like tea", "记住我喜欢茶"), or None: questions ("do you remember…?"), negations ("don't
    remember…") and corrections ("actually…", "can you change…") are not requests."""
    text = text or ""
    for match in _REMEMBER.finditer(text):
        start = max((m.end() for m in _SENTENCE_END.finditer(text, 0, match.start())), default=0)
        end_match = _SENTENCE_END.search(text, match.end())
        end = end_match.end() if end_match else len(text)
        before = text[start : match.start()]
        sentence = text[start:end]
        if sentence.rstrip().endswith(("?", "？", "吗", "吗？")) or _QUESTION_LEAD.search(before):
            continue
        if _NEGATION.search(before):
            continue
        return sentence
    return None


def _tokens(text: str) -> list[str]:
    words = []
    for word in _WORD.findall(text.casefold()):
        if _CJK.search(word):
            words.extend(_CJK.findall(word))  # Chinese: every character counts as a word
        elif len(word) >= 2 and word not in _FILLER:
            words.append(word)
    return words


def _stem(word: str) -> str:
    """A crude English stem: enough that "prefers"/"prefer", "uses"/"using", "likes"/"like"
    meet, and nothing that would need a dictionary."""
    for suffix in ("ing", "ed", "es", "s", "e"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 2:
            word = word[: -len(suffix)]
            break
    return word.removesuffix("e") if len(word) > 3 else word


def _said(word: str, said: set[str]) -> bool:
    if word in said:
        return True
    stem = _stem(word)
    for other in said:
        heard = _stem(other)
        if heard == stem:
            return True
        if (
            len(stem) >= 4
            and len(heard) >= 4
            and (heard.startswith(stem) or stem.startswith(heard))
        ):
            return True
    return False


def content_matches(content: str, said: str, *, names: set[str] = frozenset()) -> bool:
    """Do the fact's own words substantially come from what the subject said? At least
    `MATCH_SHARE` of its non-filler words (the subject's own names aside) appear in `said`,
    compared case-insensitively with plural/-ed/-ing endings folded; at least one must."""
    ignored = {part for name in names for part in _WORD.findall(name.casefold())}
    wanted = [word for word in _tokens(content) if word not in ignored]
    if not wanted:
        return False
    heard = set(_tokens(said)) | set(_WORD.findall(said.casefold()))
    found = sum(1 for word in wanted if _said(word, heard))
    return found >= MATCH_SHARE * len(wanted)


def explicit_request(
    change: str, text: str, *, content: str = "", names: set[str] = frozenset()
) -> bool:
    """Is `text` the subject's explicit request for exactly this change? Add and replace: an
    explicit "remember that …" (not a question, not negated) whose words the new content
    substantially repeats. Remove: an explicit "forget …" that is not a question."""
    if change == "remove":
        if not asked_to_forget(text):
            return False
        return not any(
            sentence.rstrip().endswith(("?", "？")) and _FORGET.search(sentence)
            for sentence in re.split(r"(?<=[.!?。！？\n])", text or "")
        )
    sentence = explicit_request_sentence(text)
    return sentence is not None and content_matches(content, text, names=names)
