"""The names of a MarianMT layer's weights and seqmap's, one definition for the import (``seqmap.hub.hf``) and the
export (``seqmap.hub.export``).

Marian's names are those under ``model.`` in its ``model.safetensors``. Each seqmap weight is the Marian weights
it lists concatenated along rows: one for most, the query, key and value projections for the fused ``in_proj``.
The embeddings, the output layer and its bias are not listed here: each direction re-orders their rows (the
vocabulary) and ties them in its own way.
"""

from __future__ import annotations

# (seqmap attention, Marian attention, Marian's norm after it, seqmap's) in the order of the sublayers
_ATTENTION = {"encoder": [("self_attn", "self_attn", "self_attn_layer_norm", "norm1")],
              "decoder": [("self_attn", "self_attn", "self_attn_layer_norm", "norm1"),
                          ("cross_attn", "encoder_attn", "encoder_attn_layer_norm", "norm2")]}
_FEED_FORWARD = (("ff.w1", "fc1"), ("ff.w2", "fc2"))


def layer_names(side: str, i: int) -> list[tuple[str, list[str]]]:
    """(seqmap name, the Marian names it concatenates along rows) for layer i of the encoder or the decoder."""
    h = p = f"{side}.layers.{i}"
    names = []
    for ours, theirs, norm, our_norm in _ATTENTION[side]:
        for part in ("weight", "bias"):
            names += [(f"{p}.{ours}.in_proj.{part}", [f"{h}.{theirs}.{x}_proj.{part}" for x in "qkv"]),
                      (f"{p}.{ours}.out_proj.{part}", [f"{h}.{theirs}.out_proj.{part}"]),
                      (f"{p}.{our_norm}.{part}", [f"{h}.{norm}.{part}"])]
    last = f"norm{len(_ATTENTION[side]) + 1}"  # the norm after the feed-forward sublayer
    for part in ("weight", "bias"):
        names += [(f"{p}.{ours}.{part}", [f"{h}.{theirs}.{part}"]) for ours, theirs in _FEED_FORWARD]
        names.append((f"{p}.{last}.{part}", [f"{h}.final_layer_norm.{part}"]))
    return names


def all_layer_names(enc_layers: int, dec_layers: int) -> list[tuple[str, list[str]]]:
    """``layer_names`` of every layer of both stacks."""
    return [name for side, n in (("encoder", enc_layers), ("decoder", dec_layers)) for i in range(n)
            for name in layer_names(side, i)]


def weight_shape(name: str, d: int, ff: int) -> tuple[int, ...]:
    """The shape of Marian layer weight ``name`` in a model of width ``d`` and feed-forward width ``ff``."""
    module, part = name.rsplit(".", 2)[-2:]
    rows, columns = {"fc1": (ff, d), "fc2": (d, ff)}.get(module, (d, d))
    return (rows,) if part == "bias" or module.endswith("layer_norm") else (rows, columns)
