"""The knowledge block of the system prompt: the passages most relevant to the current
message, from the collections this chat may use (knowledge.access), within
KNOWLEDGE_CONTEXT_SHARE of the context window (part of the system share), framed as quoted
material to cite, never instructions."""

from django.conf import settings

from chats.agent.registry import SectionText, TurnContext
from chats.agent.tokens import count_tokens
from knowledge.access import chat_may_have_collections, collections_for_turn
from knowledge.framing import FRAMING, passage_block
from knowledge.search import hybrid_search, passages_for

HEADER = "## Team knowledge\n" + FRAMING
CANDIDATES = 8


def knowledge_budget() -> int:
    """Tokens the block may take: its share of the window, never more than the system's."""
    window = settings.LLM_CONTEXT_TOKENS
    share = min(settings.KNOWLEDGE_CONTEXT_SHARE, settings.CONTEXT_SHARE_SYSTEM)
    return int(window * share)


class KnowledgeSection:
    name = "knowledge"
    order = 45

    def render(self, context: TurnContext) -> str:
        budget = knowledge_budget()
        question = (context.trigger.text or "").strip()
        if budget <= 0 or not question or not chat_may_have_collections(context.chat):
            return ""
        collections = collections_for_turn(context.chat, actor=context.actor)
        if not collections:
            return ""
        hits = hybrid_search(question, [c.pk for c in collections], limit=CANDIDATES)
        used = count_tokens(HEADER)
        blocks, ids = [], []
        for passage in passages_for(hits):
            block = passage_block(passage)
            cost = count_tokens(block) + 1
            if used + cost > budget:
                continue
            blocks.append(block)
            ids.append(passage.pk)
            used += cost
        if not blocks:
            return ""
        return SectionText(
            "\n\n".join([HEADER, *blocks]),
            {"passages": ids, "budget_tokens": budget, "candidates": len(hits)},
        )


knowledge_section = KnowledgeSection()
