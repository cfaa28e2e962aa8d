"""provider_info(): pages describe the model without building it. For an OpenAI-compatible
server the answer is the provider's own, and a process that only shows pages never imports
the `openai` SDK (about 40 MiB of the web process): tests/test_web_process_imports.py."""

from chats.agent.llm import OpenAICompatProvider, provider_info, reset_provider_cache


def test_the_settings_answer_is_the_providers_own(settings):
    settings.LLM_PROVIDER = "auto"
    settings.LLM_BASE_URL = "http://127.0.0.1:9/v1/"
    settings.LLM_MODEL = "gpt-4o-mini"
    settings.LLM_CONTEXT_TOKENS = 64000
    reset_provider_cache()
    try:
        before = provider_info()
        assert before == OpenAICompatProvider.from_settings().info
        assert before.extra["base_url"] == "http://127.0.0.1:9/v1"
    finally:
        reset_provider_cache()
