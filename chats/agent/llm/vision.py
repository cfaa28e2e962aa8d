"""Whether a model takes images (image parts in a request's messages), from LLM_VISION.

"on" and "off" say so outright; "auto" recognises the names of the models known to take
images: OpenAI's gpt-4o, gpt-4.1, gpt-4.5, gpt-5, o1/o3/o4 and chatgpt-4o; Anthropic's
claude-3 and claude-4 families (any provider prefix, e.g. OpenRouter's `anthropic/…`);
Google's gemini and gemma-3; Qwen's -vl models and qvq; llava, bakllava, pixtral,
llama-3.2-vision, llama-4, minicpm-v, internvl, moondream, and any name with "vision" or
"-vl" in it. An unknown name takes none: the hub then describes images with a vision model
or tells the model it cannot see them, never sends an image a model would refuse.
"""

import re
from functools import lru_cache

_KNOWN = re.compile(
    r"""
    (^|[/:])(
        gpt-4o | chatgpt-4o | gpt-4\.1 | gpt-4\.5 | gpt-4-turbo | gpt-5 | o1(?!-mini) | o3 | o4
      | claude-(3|sonnet-4|opus-4|haiku-4|4)
      | gemini | gemma-?3 | gemma-?4
      | qvq | llava | bakllava | pixtral | llama-?4 | minicpm-v | internvl | moondream
      | mistral-(small|medium)-3
    )
    | qwen[\w.-]*-?vl | vision | [-_]vl\b | [-_]vl[-_:]
    """,
    re.IGNORECASE | re.VERBOSE,
)


@lru_cache(maxsize=64)
def model_takes_images(model: str, setting: str = "auto") -> bool:
    """True when LLM_VISION (`setting`) says the model `model` takes image parts."""
    setting = (setting or "auto").lower()
    if setting == "on":
        return True
    if setting == "off":
        return False
    return bool(_KNOWN.search(model or ""))
