"""Reading a ``save_pretrained`` directory (or a Hub name): its JSON files and safetensors weights, one-line errors.

The architecture mappings (``seqmap.hub.hf`` for Marian and GPT-2, ``seqmap.hub.encoders`` for BERT and ViT)
read their sources through here and hand ``import_hf`` an ``Imported``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, NamedTuple

from torch import Tensor

from seqmap.config import RunConfig
from seqmap.data.hf_tokenizer import HFTokenizer
from seqmap.data.labels import LabelSet
from seqmap.paths import file_above


class HubError(ValueError):
    """A pretrained checkpoint cannot be imported; the message names the file or field and the fix."""


def out_directory(out_dir: str | os.PathLike) -> Path:
    """``--out`` as a Path, refused in one line where it or a folder above it is a file (it cannot be made)."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise HubError(f"{out} is a file; choose another --out directory")
    above = file_above(out)
    if above is not None:
        raise HubError(f"{above} is a file, so --out {out} cannot be made under it; choose another --out directory")
    return out


def resolve_source(source: str | os.PathLike) -> Path:
    """A local ``save_pretrained`` directory, or a Hub name fetched with ``huggingface_hub`` (one line when offline)."""
    path = Path(source)
    if path.is_dir():
        return path
    if path.exists():
        raise HubError(f"{path} is a file; give the directory that save_pretrained wrote (config.json, "
                       "model.safetensors, tokenizer.json)")
    if str(source).count("/") > 1 or str(source).startswith((".", "~")):
        raise HubError(f"{source}: no such directory")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise HubError(f"{source} is not a local directory, and fetching it from the Hugging Face Hub needs "
                       "huggingface_hub: pip install -e \".[hf]\"") from None
    try:
        return Path(snapshot_download(str(source), allow_patterns=["*.json", "*.safetensors", "*.model",
                                                                   "*.spm", "*.txt"]))
    except Exception as e:  # offline, unknown repository, gated model: huggingface_hub's own error types
        raise HubError(f"no local directory {source}, and it cannot be fetched from the Hugging Face Hub "
                       f"({type(e).__name__}: "
                       f"{' '.join(str(e).split())[:200]}); on a machine without Hub access, download it "
                       "elsewhere and pass the local directory") from None


def read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise HubError(f"{path} is missing; a save_pretrained directory holds it")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise HubError(f"{path} is not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise HubError(f"{path} must hold a JSON object")
    return data


def read_weights(directory: Path) -> dict[str, Tensor]:
    """``model.safetensors`` (sharded ones too); a checkpoint saved only as a pickle is refused in one line."""
    single = directory / "model.safetensors"
    index = directory / "model.safetensors.index.json"
    if single.is_file():
        return _load_safetensors(single)
    if index.is_file():
        shards = sorted(set(read_json(index).get("weight_map", {}).values()))
        weights: dict[str, Tensor] = {}
        for shard in shards:
            weights.update(_load_safetensors(directory / shard))
        return weights
    if (directory / "pytorch_model.bin").is_file():
        raise HubError(f"{directory} holds pytorch_model.bin (a pickle), which seqmap does not load; save it "
                       "again with save_pretrained(dir, safe_serialization=True) to get model.safetensors")
    raise HubError(f"{directory} has no model.safetensors; give the directory that save_pretrained wrote")


def _load_safetensors(path: Path) -> dict[str, Tensor]:
    """One safetensors file; a missing, truncated or corrupt one is one line."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not path.is_file():
        raise HubError(f"{path} is missing (model.safetensors.index.json names it); copy every shard the index "
                       "lists")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError) as e:
        raise HubError(f"{path} is not a readable safetensors file ({' '.join(str(e).split())}); it is truncated "
                       "or corrupt: copy or save_pretrained it again") from None


def rows(table: Tensor, hf_ids: list[int | None]) -> Tensor:
    """Rows of ``table`` (V_hf, D) in seqmap's id order; zero rows for reserved ids no hf token plays."""
    out = table.new_zeros(len(hf_ids), table.size(1))
    for i, hf in enumerate(hf_ids):
        if hf is not None:
            out[i] = table[hf]
    return out


class Imported(NamedTuple):
    """What an architecture's mapping gives ``import_hf``: config, weights by seqmap name, tokenizers, classes."""

    cfg: RunConfig
    weights: dict[str, Tensor]
    src_tok: HFTokenizer | None
    tgt_tok: HFTokenizer | None
    labels: LabelSet | None = None
