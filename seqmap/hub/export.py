"""Export a seqmap run in the ``transformers`` format: ``seqmap export hf RUN_DIR --out DIR``.

* ``family: lm`` -> ``GPT2LMHeadModel`` (learned positions, pre-LN, unscaled embeddings, an activation
  GPT-2 has): ``Conv1D`` weights transposed, the fused ``in_proj`` is ``c_attn``.
* ``family: transformer`` with ``positional: t5`` -> ``T5ForConditionalGeneration`` (``seqmap.hub.t5``).
* ``family: transformer`` -> ``MarianMTModel`` (post-LN, sinusoidal positions in the split layout): the fused
  ``in_proj`` split into ``q/k/v_proj``, ``output_bias`` as ``final_logits_bias`` (zeros without it). An
  output layer untied from the embeddings (``model.tie_embeddings: false``) is ``lm_head`` with
  ``tie_word_embeddings: false``; ``transformers`` 5 then ties nothing, so ``shared``, the encoder's and the
  decoder's ``embed_tokens`` are written as three copies of the one table. Separate source and target
  tables (``model.share_vocab: false``) are ``share_encoder_decoder_embeddings: false`` with ``vocab_size``
  and ``decoder_vocab_size``.

An option with no equivalent is refused in one line naming it. The vocabulary goes back to the model's own
order when the run's tokenizer was imported (``seqmap.data.hf_tokenizer``); a seqmap-trained model keeps
seqmap's ids (0 PAD, 1 BOS, 2 EOS, 3 UNK), and its GPT-2 ``config.json`` says so in ``seqmap_tokenizer``
(its special ids, and that its prompts start with EOS), so ``seqmap import hf`` gives the model back.
Tokenizers: an imported one is written back as it came (GPT-2's and T5's ``tokenizer.json``; Marian's
``source.spm``, ``target.spm`` and ``vocab.json``); seqmap's char and word tokenizers become a word-level
``tokenizer.json``; a sentencepiece one is not converted (``TOKENIZER.txt`` says so). The decode options of the
run's config become the model's ``generation_config``.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor

from seqmap.config import DecodeConfig, ModelConfig
from seqmap.data.hf_tokenizer import HFTokenizer, MarianBackend
from seqmap.data.tokenizer_base import BOS, EOS, PAD, UNK
from seqmap.hub.marian_names import all_layer_names, weight_shape
from seqmap.hub.source import HubError, out_directory

FAMILIES = {"lm": "GPT2LMHeadModel", "transformer": "MarianMTModel, or T5ForConditionalGeneration with positional t5"}


def exported_class(m: ModelConfig) -> str:
    """The ``transformers`` class a run exports as (T5 for a Transformer with T5's relative positions)."""
    if m.family == "transformer":
        return "T5ForConditionalGeneration" if m.positional == "t5" else "MarianMTModel"
    return FAMILIES[m.family]


def export_hf(run, out_dir: str | os.PathLike) -> Path:
    """Write the run as a ``transformers`` directory (see the module docstring); returns ``out_dir``."""
    from seqmap.hub.t5 import export_t5, export_t5_tokenizer

    family = run.cfg.model.family
    if family not in FAMILIES:
        raise HubError(f"{run.checkpoint}: model.family={family}; seqmap exports "
                       f"{', '.join(f'{k} (as {v})' for k, v in FAMILIES.items())}")
    out = fresh_out(out_dir)
    t5 = exported_class(run.cfg.model) == "T5ForConditionalGeneration"
    model = _gpt2(run) if family == "lm" else export_t5(run, _opening) if t5 else _marian(run)
    _generation_config(model, run.cfg.decode, family)
    model.save_pretrained(out)
    if family == "lm":
        _export_tokenizer(run.tgt_tok, out)
    elif not (t5 and export_t5_tokenizer(run, out)):
        _export_marian_tokenizer(run, out)
    return out


def fresh_out(out_dir: str | os.PathLike) -> Path:
    """``--out`` of an export: a new or empty directory (files of an earlier export are not mixed with the new)."""
    out = out_directory(out_dir)
    if out.is_dir() and any(out.iterdir()):
        raise HubError(f"{out} exists and is not empty; choose another --out directory")
    return out


def _generation_config(model, decode: DecodeConfig, family: str) -> None:
    """The run's decode options as the model's defaults for ``generate``."""
    g = model.generation_config
    g.num_beams = decode.beam_size
    g.length_penalty = decode.length_penalty
    g.do_sample = False
    g.no_repeat_ngram_size = decode.no_repeat_ngram
    if decode.beam_ranking == "hf":
        g.early_stopping = decode.hf_early_stopping
    if family == "transformer" and decode.max_len_a == 0:  # a fixed limit; Marian's and T5's count their start token
        g.max_length = decode.max_len_b + 1


def _load(model, weights: dict[str, Tensor], ignore: tuple[str, ...]) -> None:
    missing, unexpected = model.load_state_dict({k: v.contiguous() for k, v in weights.items()}, strict=False)
    missing = [k for k in missing if not k.endswith(ignore)]
    if missing or unexpected:  # an internal invariant: the mapping below names every weight
        raise HubError(f"export mapping incomplete: missing {missing[:3]}, unexpected {unexpected[:3]}")


def _vocab_order(tok) -> tuple[list[int], HFTokenizer | None]:
    """For every exported id, the seqmap row it takes; and the imported tokenizer, if any."""
    if isinstance(tok, HFTokenizer):
        return [tok.to_seqmap(h) for h in range(tok.hf_vocab)], tok
    return list(range(tok.vocab_size)), None


def _opening(run, compatible: Callable[[ModelConfig], str | None], name: str):
    """What both exports start from: the model refused in one line when ``compatible`` says why it has no ``name``
    equivalent; else (model config, weights, the exported vocabulary order, the imported tokenizer or None)."""
    m = run.cfg.model
    why = compatible(m)
    if why is not None:
        raise HubError(f"{run.checkpoint}: {why}; this model has no {name} equivalent")
    order, hf_tok = _vocab_order(run.tgt_tok)
    return m, run.model.state_dict(), order, hf_tok


def _plain_attention(m: ModelConfig, name: str) -> str | None:
    """Why the run's projections differ from GPT-2's and Marian's (biases, scores over sqrt(d_model / n_heads), no
    output rescale); None when they do not."""
    if not m.linear_bias:
        return f"model.linear_bias=false ({name}'s projections have biases)"
    if not m.scale_attention:
        return f"model.scale_attention=false ({name} divides attention scores by sqrt(head width))"
    if m.head_dim not in (None, m.d_model // m.n_heads):
        return f"model.head_dim={m.head_dim} ({name}'s heads are d_model / n_heads wide)"
    if m.scale_output:
        return f"model.scale_output=true ({name} does not rescale its decoder output)"
    return None


# -- GPT-2 ---------------------------------------------------------------------------------------------


def _gpt2_compatible(m: ModelConfig) -> str | None:
    """Why a decoder-only seqmap model has no GPT-2 equivalent (None when it has one)."""
    wanted = {"positional": "learned", "norm_position": "pre", "norm": "layernorm", "scale_embeddings": False}
    for key, value in wanted.items():
        if getattr(m, key) != value:
            return f"model.{key}={getattr(m, key)!r} (GPT-2 has {key} {value!r})"
    if m.activation not in ("gelu_tanh", "gelu", "relu"):
        return f"model.activation={m.activation!r} (GPT-2's MLP takes gelu_tanh, gelu or relu)"
    if m.n_kv_heads not in (None, m.n_heads):
        return f"model.n_kv_heads={m.n_kv_heads} (GPT-2 has one key/value head per query head)"
    if m.output_bias:
        return "model.output_bias=true (GPT-2's output layer has no bias)"
    return _plain_attention(m, "GPT-2")


def _gpt2(run):
    from transformers import GPT2Config, GPT2LMHeadModel

    m, sd, order, hf_tok = _opening(run, _gpt2_compatible, "GPT-2")
    eos = hf_tok.roles["eos"] if hf_tok else EOS
    d = m.d_model
    config = GPT2Config(vocab_size=len(order), n_positions=m.max_len, n_embd=d, n_layer=m.dec_layers,
                        n_head=m.n_heads, n_inner=m.d_ff,
                        activation_function={"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu"}[m.activation],
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5,
                        bos_token_id=hf_tok.roles.get("bos", eos) if hf_tok and hf_tok.prompt == "text" else eos,
                        eos_token_id=eos,
                        tie_word_embeddings=m.tie_embeddings)
    if hf_tok is None or hf_tok.prompt == "eos":  # seqmap's prompts (EOS, then the text) and special ids, so
        roles = hf_tok.roles if hf_tok else {"pad": PAD, "bos": BOS, "eos": EOS, "unk": UNK}  # import gives them back
        config.seqmap_tokenizer = {"roles": roles, "prompt": "eos"}
    model = GPT2LMHeadModel(config).eval()
    index = torch.tensor(order)
    weights = {"transformer.wte.weight": sd["embedding.table.weight"][index],
               "transformer.wpe.weight": sd["positional.table.weight"],
               "transformer.ln_f.weight": sd["final_norm.weight"], "transformer.ln_f.bias": sd["final_norm.bias"]}
    if not m.tie_embeddings:
        weights["lm_head.weight"] = sd["output.weight"][index]
    for i in range(m.dec_layers):
        h, p = f"transformer.h.{i}", f"layers.{i}"
        weights[f"{h}.attn.c_attn.weight"] = sd[f"{p}.self_attn.in_proj.weight"].t()
        weights[f"{h}.attn.c_attn.bias"] = sd[f"{p}.self_attn.in_proj.bias"]
        weights[f"{h}.attn.c_proj.weight"] = sd[f"{p}.self_attn.out_proj.weight"].t()
        weights[f"{h}.attn.c_proj.bias"] = sd[f"{p}.self_attn.out_proj.bias"]
        weights[f"{h}.mlp.c_fc.weight"] = sd[f"{p}.ff.w1.weight"].t()
        weights[f"{h}.mlp.c_fc.bias"] = sd[f"{p}.ff.w1.bias"]
        weights[f"{h}.mlp.c_proj.weight"] = sd[f"{p}.ff.w2.weight"].t()
        weights[f"{h}.mlp.c_proj.bias"] = sd[f"{p}.ff.w2.bias"]
        for n in (1, 2):
            for part in ("weight", "bias"):
                weights[f"{h}.ln_{n}.{part}"] = sd[f"{p}.norm{n}.{part}"]
    _load(model, weights, ("attn.bias", "attn.masked_bias", "lm_head.weight"))
    if hf_tok is None:  # seqmap never generates PAD, BOS or UNK; transformers should not either
        model.generation_config.suppress_tokens = [PAD, BOS, UNK]
    return model


# -- Marian --------------------------------------------------------------------------------------------


def _marian_compatible(m: ModelConfig) -> str | None:
    """Why a seqmap Transformer has no MarianMT equivalent (None when it has one)."""
    wanted = {"positional": "sinusoidal", "sinusoidal_layout": "split", "norm_position": "post",
              "norm": "layernorm"}
    for key, value in wanted.items():
        if getattr(m, key) != value:
            return f"model.{key}={getattr(m, key)!r} (MarianMT has {key} {value!r})"
    if m.activation not in ("silu", "gelu", "relu", "gelu_tanh"):
        return f"model.activation={m.activation!r} (MarianMT's feed-forward takes silu, gelu, gelu_tanh or relu)"
    if m.n_kv_heads not in (None, m.n_heads):
        return f"model.n_kv_heads={m.n_kv_heads} (MarianMT has one key/value head per query head)"
    return _plain_attention(m, "MarianMT")


def _marian(run):
    from transformers import MarianConfig, MarianMTModel

    m, sd, order, hf_tok = _opening(run, _marian_compatible, "MarianMT")
    src_order = order if m.share_vocab else _vocab_order(run.src_tok)[0]
    if hf_tok is not None:  # Marian's decoder starts from its pad token: seqmap's BOS row plays it
        eos, pad, start = hf_tok.roles["eos"], hf_tok.roles["pad"], hf_tok.roles["pad"]
    else:
        eos, pad, start = EOS, PAD, BOS
    d = m.d_model
    ff_dropout = m.dropout if m.ff_dropout is None else m.ff_dropout
    config = MarianConfig(vocab_size=len(src_order), decoder_vocab_size=len(order), d_model=d,
                          encoder_layers=m.enc_layers, decoder_layers=m.dec_layers,
                          encoder_attention_heads=m.n_heads, decoder_attention_heads=m.n_heads,
                          encoder_ffn_dim=m.d_ff, decoder_ffn_dim=m.d_ff, max_position_embeddings=m.max_len,
                          activation_function={"silu": "swish", "gelu": "gelu", "relu": "relu",
                                               "gelu_tanh": "gelu_new"}[m.activation],
                          scale_embedding=m.scale_embeddings, dropout=m.dropout,
                          attention_dropout=m.attention_dropout, activation_dropout=ff_dropout,
                          pad_token_id=pad, eos_token_id=eos, decoder_start_token_id=start,
                          forced_eos_token_id=eos, share_encoder_decoder_embeddings=m.share_vocab,
                          tie_word_embeddings=m.tie_embeddings)
    model = MarianMTModel(config).eval()
    index = torch.tensor(order)
    bias = sd["decoder.output.bias"][index] if m.output_bias else torch.zeros(len(order))
    output = None if m.tie_embeddings else sd["decoder.output.weight"][index]  # its rows in the vocabulary's order
    if hf_tok is not None:  # Marian's decoder starts from its pad token's embedding: seqmap's BOS row
        index = index.clone()
        index[pad] = BOS
    table = sd["decoder.embedding.table.weight"][index]
    weights = {"model.decoder.embed_tokens.weight": table, "lm_head.weight": table if output is None else output,
               "final_logits_bias": bias[None, :]}
    if m.share_vocab:  # transformers 5 ties these to shared only when tie_word_embeddings is true: all written
        weights["model.shared.weight"] = weights["model.encoder.embed_tokens.weight"] = table
    else:
        weights["model.encoder.embed_tokens.weight"] = sd["encoder.embedding.table.weight"][torch.tensor(src_order)]
    for ours, theirs in all_layer_names(m.enc_layers, m.dec_layers):  # seqmap's in_proj split into q, k, v
        sizes = [weight_shape(name, d, m.d_ff)[0] for name in theirs]
        weights.update(zip((f"model.{name}" for name in theirs), sd[ours].split(sizes), strict=True))
    _load(model, weights, ("embed_positions.weight",))
    # seqmap never generates PAD, BOS or UNK; transformers should not either
    banned = [PAD, BOS, UNK] if hf_tok is None else [hf_tok.roles[r] for r in ("pad", "unk") if r in hf_tok.roles]
    model.generation_config.bad_words_ids = [[t] for t in banned]
    model.generation_config.forced_eos_token_id = None  # seqmap forces no EOS at the length limit
    return model


# -- tokenizers ----------------------------------------------------------------------------------------


def _export_marian_tokenizer(run, out: Path) -> None:
    """An imported Marian tokenizer goes back as source.spm, target.spm and vocab.json; others as for GPT-2."""
    src, tgt = run.src_tok, run.tgt_tok
    if isinstance(tgt, HFTokenizer) and isinstance(tgt.backend, MarianBackend):
        from transformers import MarianTokenizer

        if not isinstance(src, HFTokenizer) or not isinstance(src.backend, MarianBackend):
            raise HubError(f"{run.checkpoint}: the target tokenizer is Marian's but the source one is "
                           f"{src.kind}; both sides must come from the same Marian model")
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            (tmp / "source.spm").write_bytes(src.backend.spm_bytes)
            (tmp / "target.spm").write_bytes(tgt.backend.spm_bytes)
            (tmp / "vocab.json").write_text(json.dumps(tgt.backend.vocab, ensure_ascii=False), encoding="utf-8")
            names = {r: tgt.backend.id_to_token(i) for r, i in tgt.roles.items()}
            MarianTokenizer(str(tmp / "source.spm"), str(tmp / "target.spm"), str(tmp / "vocab.json"),
                            eos_token=names["eos"], pad_token=names["pad"],
                            unk_token=names.get("unk", "<unk>")).save_pretrained(out)
        return
    if src.fingerprint() != tgt.fingerprint():
        vocabularies = ("one shared vocabulary" if run.cfg.model.share_vocab else
                        "separate vocabularies (share_encoder_decoder_embeddings false)")
        (out / "SOURCE_TOKENIZER.txt").write_text(
            f"This model was trained with separate source and target tokenizers over {vocabularies}; the\n"
            "tokenizer written here is the target side. Encode sources with seqmap (the run's tokenizer/).\n",
            encoding="utf-8")
    _export_tokenizer(tgt, out)


def _export_tokenizer(tok, out: Path) -> None:
    """tokenizer.json (and its transformers config) for the exported model, where the tokenizer converts."""
    from transformers import PreTrainedTokenizerFast

    if isinstance(tok, HFTokenizer) and tok.backend.name == "tokenizers":
        hf = tok.tok
        names = {r: hf.id_to_token(tok.roles.get(r, tok.roles["eos"])) for r in ("eos", "bos", "unk")}
        if "pad" in tok.roles:  # a seqmap-trained LM's export, imported (GPT-2 has no pad token)
            names["pad"] = hf.id_to_token(tok.roles["pad"])
        PreTrainedTokenizerFast(tokenizer_object=hf, **{f"{r}_token": n for r, n in names.items()}).save_pretrained(out)
        return
    if tok.kind in ("char", "word"):
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers

        vocab = {piece: i for i, piece in enumerate(tok.pieces(range(tok.vocab_size)))}
        words = Tokenizer(models.WordLevel(vocab, unk_token=tok.pieces([UNK])[0]))
        if tok.kind == "char":  # characters decode side by side (WordLevel's default puts spaces between tokens)
            words.pre_tokenizer, words.decoder = pre_tokenizers.Split("", "isolated"), decoders.Fuse()
        else:
            words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        names = tok.pieces([PAD, BOS, EOS, UNK])
        PreTrainedTokenizerFast(tokenizer_object=words, pad_token=names[0], bos_token=names[1], eos_token=names[2],
                                unk_token=names[3]).save_pretrained(out)
        return
    (out / "TOKENIZER.txt").write_text(
        f"This model was trained with seqmap's {tok.kind} (sentencepiece) tokenizer, which is not converted to\n"
        "tokenizer.json here: its token ids are seqmap's (0 PAD, 1 BOS, 2 EOS, 3 UNK). Encode text with seqmap\n"
        "(seqmap.data.tokenizers.load_tokenizer on the run's tokenizer/ directory).\n", encoding="utf-8")
