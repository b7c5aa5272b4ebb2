"""The ``model`` section: which family, how wide, how deep, which attention and positions."""

from __future__ import annotations

from dataclasses import dataclass, field

from seqmap.config_io import ConfigError, check_choice, check_positive, check_types
from seqmap.nn.layers import ACTIVATIONS
from seqmap.nn.positional import POSITIONAL_KINDS, SINUSOIDAL_LAYOUTS

CONVS2S_POSITIONS = ("learned", "sinusoidal", "none")  # model.positional of convs2s: added to the embeddings


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
        check_choice(s, "family", self.family, ("transformer", "lm", "rnn", "rnn_lm", "classifier", "vit", "gat",
                                           "speech", "convs2s"))
        check_choice(s, "graph_attention", self.graph_attention, ("sparse", "dense"))
        check_positive(s, "out_heads", self.out_heads)
        check_choice(s, "pooling", self.pooling, ("cls", "mean"))
        check_choice(s, "pooler", self.pooler, ("none", "tanh"))
        if (self.embedding_norm or self.pooler != "none") and self.family not in ("classifier", "vit"):
            raise ConfigError(f"model.embedding_norm and model.pooler are for model.family classifier or vit, not "
                              f"{self.family} (got model.embedding_norm={self.embedding_norm}, model.pooler="
                              f"{self.pooler!r}); remove them")
        if not 0.0 < self.norm_eps < 1.0:
            raise ConfigError(f"model.norm_eps must be in (0, 1), got {self.norm_eps}")
        check_choice(s, "norm_position", self.norm_position, ("pre", "post"))
        check_choice(s, "norm", self.norm, ("layernorm", "rmsnorm"))
        check_choice(s, "activation", self.activation, ACTIVATIONS)
        check_choice(s, "positional", self.positional, POSITIONAL_KINDS)
        check_choice(s, "sinusoidal_layout", self.sinusoidal_layout, SINUSOIDAL_LAYOUTS)
        check_choice(s, "rnn_cell", self.rnn_cell, ("rnn", "lstm", "gru"))
        check_choice(s, "rnn_attention", self.rnn_attention, ("none", "bahdanau", "dot", "general", "concat"))
        for name in ("d_model", "n_heads", "d_ff", "dec_layers", "max_len", "emb_size", "hidden_size", "patch_size"):
            check_positive(s, name, getattr(self, name))
        for name in ("n_mels", "conv_channels", "conv_kernel"):
            check_positive(s, name, getattr(self, name))
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
            check_positive(s, "enc_layers", self.enc_layers)
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
            check_positive("model", "head_dim", self.head_dim)
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
