"""Which models can be picked: the bundled catalogue and the configs already in the Hugging
Face cache on this machine (offline; nothing is downloaded). Headless, for ``estimate
--list`` and the dashboard's model picker.

The cache layout is ``huggingface_hub``'s: ``<cache>/models--<org>--<name>/snapshots/<rev>/
config.json`` with ``<cache>`` = ``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else
``~/.cache/huggingface/hub`` (huggingface_hub docs, "Manage huggingface_hub cache-system";
environment variables ``HF_HOME`` / ``HF_HUB_CACHE``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gpumem_tui.estimator.architecture import ArchitectureError, catalogue_names, load_architecture


@dataclass(frozen=True, slots=True)
class ModelChoice:
    """One pickable model. ``source``: what :func:`load_architecture` takes (catalogue name
    or config.json path); ``origin``: "catalogue" or "hf-cache"; ``description``: the family
    description that reads it (``exact`` False: the general one); ``params``: total parameter
    elements, or None when the config cannot be modelled (``error`` says why)."""

    name: str
    source: str
    origin: str
    model_type: str
    description: str
    exact: bool
    params: int | None
    error: str | None = None


def hf_cache_dir(env: dict[str, str] | None = None) -> Path:
    """The Hugging Face hub cache directory by the environment (see the module docstring)."""
    env = os.environ if env is None else env
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub"
    return Path("~/.cache/huggingface/hub").expanduser()


def _choice(name: str, source: str, origin: str) -> ModelChoice:
    try:
        arch = load_architecture(source)
    except (ArchitectureError, OSError) as exc:
        return ModelChoice(name, source, origin, "?", "not modelled", False, None, str(exc))
    return ModelChoice(name, source, origin, arch.model_type, arch.family.name, arch.family.verified, arch.total_params)


def catalogue_choices() -> list[ModelChoice]:
    """Every bundled catalogue entry, sorted by name."""
    return [_choice(name, name, "catalogue") for name in catalogue_names()]


def cached_configs(cache: Path | None = None) -> list[tuple[str, str]]:
    """``(repo id, config.json path)`` of every model in the local Hugging Face cache (newest
    snapshot), sorted, without reading the files: cheap enough for a dashboard start. [] when
    there is no cache or it cannot be listed."""
    cache = hf_cache_dir() if cache is None else cache
    out = []
    try:
        repos = sorted(p for p in cache.iterdir() if p.name.startswith("models--"))
        for repo in repos:
            configs = sorted(repo.glob("snapshots/*/config.json"), key=lambda p: p.stat().st_mtime)
            if configs:
                out.append((repo.name[len("models--"):].replace("--", "/"), str(configs[-1])))
    except OSError:
        return out
    return out


def cached_choices(cache: Path | None = None) -> list[ModelChoice]:
    """Models whose ``config.json`` is in the local Hugging Face cache (newest snapshot of
    each repository), sorted by repository id; [] when there is no cache. Never raises for
    an unreadable entry: it is listed with its ``error``."""
    return [_choice(repo_id, path, "hf-cache") for repo_id, path in cached_configs(cache)]


def search_models(query: str, cache: Path | None = None) -> list[ModelChoice]:
    """Catalogue and cached models whose name or model type contains every word of
    ``query`` (case-insensitive); cached models first, then the catalogue."""
    words = query.lower().split()
    found = cached_choices(cache) + catalogue_choices()
    return [c for c in found if all(w in f"{c.name} {c.model_type}".lower() for w in words)]
