"""One builder: a typed ``ModelConfig`` in, a ready model out.

This is the only place that chooses modules by ``cfg.family``; downstream code (training,
decoding) speaks the protocol in ``seqmap.models.protocol`` and reads the family only to check a
config or to name it in a log.
"""

from __future__ import annotations

from torch import nn

from seqmap.config import ConfigError, ModelConfig
from seqmap.data.tokenizer_base import UNK
from seqmap.models.classifier import TransformerClassifier
from seqmap.models.convs2s import ConvS2S, ConvS2SAttention, ConvS2SDecoder, ConvS2SDecoderLayer, ConvS2SEncoder
from seqmap.models.gat import GAT
from seqmap.models.lm import DecoderOnlyLM
from seqmap.models.rnn_lm import RNNLM
from seqmap.models.speech import SpeechTransformer
from seqmap.models.transformer import Transformer, TransformerDecoder, TransformerEncoder
from seqmap.nn.audio import AudioFrontEnd
from seqmap.nn.conformer import ConformerLayer, ConvModule
from seqmap.nn.copy import CopyHead
from seqmap.nn.glu_conv import CausalGLUConv, GLUConv, scaled_linear
from seqmap.nn.layers import DecoderLayer, EncoderLayer, FeedForward, TokenEmbedding, make_norm
from seqmap.nn.multihead import MultiHeadAttention
from seqmap.nn.patches import PatchEmbedding
from seqmap.nn.positional import LearnedPositional, build_positional


def build_model(cfg: ModelConfig) -> nn.Module:
    """Build the model family named by ``cfg.family`` (transformer, lm, rnn, rnn_lm, classifier, vit, gat, speech,
    convs2s)."""
    if cfg.family == "gat":
        return build_gat(cfg)
    if cfg.tgt_vocab <= 0 and cfg.family != "vit":
        raise ConfigError("model.tgt_vocab must be set (> 0): the size of the target vocabulary")
    if cfg.family == "vit":
        return build_vit(cfg)
    if cfg.family == "speech":
        return build_speech(cfg)
    if cfg.family not in ("lm", "rnn_lm") and cfg.src_vocab <= 0:
        raise ConfigError("model.src_vocab must be set (> 0): the size of the source vocabulary")
    if cfg.family == "transformer":
        return build_transformer(cfg)
    if cfg.family == "convs2s":
        return build_convs2s(cfg)
    if cfg.family == "classifier":
        return build_classifier(cfg, cfg.n_classes, cfg.pooling)
    if cfg.family == "lm":
        return build_lm(cfg)
    if cfg.family == "rnn_lm":
        return RNNLM(cfg.tgt_vocab, cfg.emb_size, cfg.hidden_size, cfg.dec_layers, cfg.rnn_cell, cfg.dropout,
                     cfg.tie_embeddings, cfg.pad_id)
    from seqmap.models.rnn import build_rnn

    return build_rnn(cfg)


def _attention(cfg: ModelConfig) -> MultiHeadAttention:
    return MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.n_kv_heads, dropout=cfg.attention_dropout,
                              bias=cfg.linear_bias, scale=None if cfg.scale_attention else 1.0, head_dim=cfg.head_dim)


def _ff(cfg: ModelConfig) -> FeedForward:
    return FeedForward(cfg.d_model, cfg.d_ff, cfg.activation, cfg.dropout if cfg.ff_dropout is None else cfg.ff_dropout,
                       bias=cfg.linear_bias)


def _norm(cfg: ModelConfig) -> nn.Module:
    return make_norm(cfg.norm, cfg.d_model, cfg.norm_eps)


def _final_norm(cfg: ModelConfig) -> nn.Module:
    """Pre-LN stacks end with a norm (the residual stream is never normalised otherwise)."""
    return _norm(cfg) if cfg.norm_position == "pre" else nn.Identity()


def _encoder_layer(cfg: ModelConfig, causal: bool) -> EncoderLayer:
    return EncoderLayer(_attention(cfg), _ff(cfg), _norm(cfg), _norm(cfg), cfg.dropout,
                        pre_norm=cfg.norm_position == "pre", causal=causal)


def _decoder_layer(cfg: ModelConfig) -> DecoderLayer:
    return DecoderLayer(_attention(cfg), _attention(cfg), _ff(cfg), _norm(cfg), _norm(cfg), _norm(cfg),
                        cfg.dropout, pre_norm=cfg.norm_position == "pre")


def _positional(cfg: ModelConfig, causal: bool):
    """The positional scheme of one stack; a bad option of it (``relative_clip``, ``t5_buckets``, ``t5_max_distance``,
    ``rope_base``: each message starts with its name) is a ConfigError naming ``model.<option>``."""
    try:
        return build_positional(cfg.positional, d_model=cfg.d_model, n_heads=cfg.n_heads, max_len=cfg.max_len,
                                causal=causal, relative_clip=cfg.relative_clip, relative_values=cfg.relative_values,
                                t5_buckets=cfg.t5_buckets, t5_max_distance=cfg.t5_max_distance,
                                rope_base=cfg.rope_base, sinusoidal_layout=cfg.sinusoidal_layout)
    except ValueError as e:
        raise ConfigError(f"model.{e}") from None


def _output(cfg: ModelConfig, embedding: TokenEmbedding) -> nn.Linear:
    output = nn.Linear(cfg.d_model, cfg.tgt_vocab, bias=cfg.output_bias)
    if cfg.tie_embeddings:
        output.weight = embedding.table.weight
    return output


def _init_linears(model: nn.Module) -> None:
    """Xavier-uniform weights and zero biases for every Linear (embeddings keep their own init)."""
    embedding_weights = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    for module in model.modules():
        if isinstance(module, nn.Linear):
            if id(module.weight) not in embedding_weights:  # a tied output layer keeps the embedding's init
                nn.init.xavier_uniform_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)


def build_transformer(cfg: ModelConfig) -> Transformer:
    if cfg.share_vocab and cfg.src_vocab != cfg.tgt_vocab:
        raise ConfigError(f"model.share_vocab=true needs src_vocab == tgt_vocab (got {cfg.src_vocab} and "
                          f"{cfg.tgt_vocab}); use a joint vocabulary or set model.share_vocab=false")
    tgt_embedding = TokenEmbedding(cfg.tgt_vocab, cfg.d_model, cfg.pad_id, cfg.scale_embeddings)
    src_embedding = (tgt_embedding if cfg.share_vocab
                     else TokenEmbedding(cfg.src_vocab, cfg.d_model, cfg.pad_id, cfg.scale_embeddings))
    encoder = TransformerEncoder(
        src_embedding, _positional(cfg, causal=False),
        [_encoder_layer(cfg, causal=False) for _ in range(cfg.enc_layers)], _final_norm(cfg), cfg.dropout)
    decoder = TransformerDecoder(
        tgt_embedding, _positional(cfg, causal=True),
        [_decoder_layer(cfg) for _ in range(cfg.dec_layers)], _final_norm(cfg),
        _output(cfg, tgt_embedding), cfg.dropout, output_scale=cfg.d_model**-0.5 if cfg.scale_output else 1.0)
    model = Transformer(encoder, decoder, CopyHead(cfg.d_model) if cfg.copy else None, unk_id=UNK)
    _init_linears(model)
    return model


CONVS2S_EMBEDDING_STD = 0.1  # Gehring et al.: every embedding (tokens and positions) starts from N(0, 0.1)


def _convs2s_positional(cfg: ModelConfig):
    """The absolute positions of one ConvS2S stack, E wide; a learned table starts from N(0, 0.1)."""
    positional = build_positional(cfg.positional, d_model=cfg.emb_size, n_heads=1, max_len=cfg.max_len,
                                  causal=False, sinusoidal_layout=cfg.sinusoidal_layout)
    if isinstance(positional, LearnedPositional):
        nn.init.normal_(positional.table.weight, std=CONVS2S_EMBEDDING_STD)
    return positional


def build_convs2s(cfg: ModelConfig) -> ConvS2S:
    """ConvS2S (Gehring et al. 2017) from ``cfg``: emb_size E, hidden_size C, kernel_size k, enc_layers,
    dec_layers, dropout, positional (learned, sinusoidal or none), max_len, tie_embeddings, share_vocab,
    output_bias. Embeddings are not scaled (scale_embeddings is for Transformers); the paper's
    initialisation is in the modules (``seqmap.nn.glu_conv``)."""
    if cfg.share_vocab and cfg.src_vocab != cfg.tgt_vocab:
        raise ConfigError(f"model.share_vocab=true needs src_vocab == tgt_vocab (got {cfg.src_vocab} and "
                          f"{cfg.tgt_vocab}); use a joint vocabulary or set model.share_vocab=false")
    e, c, k, p = cfg.emb_size, cfg.hidden_size, cfg.kernel_size, cfg.dropout
    tgt_embedding = TokenEmbedding(cfg.tgt_vocab, e, cfg.pad_id, scale=False, std=CONVS2S_EMBEDDING_STD)
    src_embedding = (tgt_embedding if cfg.share_vocab
                     else TokenEmbedding(cfg.src_vocab, e, cfg.pad_id, scale=False, std=CONVS2S_EMBEDDING_STD))
    encoder = ConvS2SEncoder(src_embedding, _convs2s_positional(cfg),
                             [GLUConv(c, k, p) for _ in range(cfg.enc_layers)], c, p,
                             grad_scale=1.0 / (2 * cfg.dec_layers))  # each attention reads z twice
    output = scaled_linear(e, cfg.tgt_vocab, p, bias=cfg.output_bias)  # dropout precedes it
    if cfg.tie_embeddings:
        output.weight = tgt_embedding.table.weight
    layers = [ConvS2SDecoderLayer(CausalGLUConv(c, k, p), ConvS2SAttention(c, e)) for _ in range(cfg.dec_layers)]
    decoder = ConvS2SDecoder(tgt_embedding, _convs2s_positional(cfg), layers, c, output, p)
    return ConvS2S(encoder, decoder)


def build_lm(cfg: ModelConfig) -> DecoderOnlyLM:
    embedding = TokenEmbedding(cfg.tgt_vocab, cfg.d_model, cfg.pad_id, cfg.scale_embeddings)
    model = DecoderOnlyLM(
        embedding, _positional(cfg, causal=True),
        [_encoder_layer(cfg, causal=True) for _ in range(cfg.dec_layers)], _final_norm(cfg),
        _output(cfg, embedding), cfg.dropout)
    _init_linears(model)
    return model


def _pooler(cfg: ModelConfig) -> nn.Module | None:
    """BERT's pooler (Linear D -> D, tanh) for ``model.pooler: tanh``; None for none."""
    return nn.Sequential(nn.Linear(cfg.d_model, cfg.d_model), nn.Tanh()) if cfg.pooler == "tanh" else None


def build_classifier(cfg: ModelConfig, n_classes: int, pooling: str = "cls") -> TransformerClassifier:
    """The encoder-only classifier: ``cfg.src_vocab`` tokens, ``cfg.enc_layers`` layers, ``n_classes`` labels."""
    if cfg.src_vocab <= 0:
        raise ConfigError("model.src_vocab must be set (> 0): the size of the input vocabulary")
    if n_classes < 2:
        raise ConfigError(f"model.n_classes must be at least 2 (set from the training labels), got {n_classes}")
    embedding = TokenEmbedding(cfg.src_vocab, cfg.d_model, cfg.pad_id, cfg.scale_embeddings)
    encoder = TransformerEncoder(
        embedding, _positional(cfg, causal=False),
        [_encoder_layer(cfg, causal=False) for _ in range(cfg.enc_layers)], _final_norm(cfg), cfg.dropout,
        _norm(cfg) if cfg.embedding_norm else None)
    model = TransformerClassifier(encoder, n_classes, pooling, cfg.dropout, _pooler(cfg))
    _init_linears(model)
    return model


def build_vit(cfg: ModelConfig) -> TransformerClassifier:
    """The Vision Transformer: the encoder-only classifier reading image patches instead of tokens."""
    shape = (cfg.image_channels, cfg.image_height, cfg.image_width)
    if min(shape) <= 0:
        raise ConfigError("model.image_channels/image_height/image_width must be set (> 0): the training images' "
                          "shape (set by `seqmap train`)")
    if cfg.image_height % cfg.patch_size or cfg.image_width % cfg.patch_size:
        raise ConfigError(f"model.patch_size={cfg.patch_size} must divide the image size {cfg.image_height}x"
                          f"{cfg.image_width}; choose a divisor, or resize the images (data.image_size)")
    n_tokens = (cfg.image_height // cfg.patch_size) * (cfg.image_width // cfg.patch_size) + (cfg.pooling == "cls")
    if cfg.positional == "learned" and cfg.max_len < n_tokens:
        raise ConfigError(f"model.max_len={cfg.max_len} learned positions cannot cover the {n_tokens} patches"
                          f"{' + CLS' if cfg.pooling == 'cls' else ''}; raise model.max_len to at least {n_tokens}")
    if cfg.n_classes < 2:
        raise ConfigError(f"model.n_classes must be at least 2 (set from the training labels), got {cfg.n_classes}")
    _check_pixel_stats(cfg)
    patches = PatchEmbedding(*shape, cfg.patch_size, cfg.d_model, cfg.pixel_mean or None, cfg.pixel_std or None)
    encoder = TransformerEncoder(
        patches, _positional(cfg, causal=False),
        [_encoder_layer(cfg, causal=False) for _ in range(cfg.enc_layers)], _final_norm(cfg), cfg.dropout,
        _norm(cfg) if cfg.embedding_norm else None)
    model = TransformerClassifier(encoder, cfg.n_classes, cfg.pooling, cfg.dropout, _pooler(cfg))
    _init_linears(model)
    return model


def _check_pixel_stats(cfg: ModelConfig) -> None:
    """``model.pixel_mean`` / ``pixel_std``: both or neither (`seqmap train` sets both), one number per channel."""
    mean, std = cfg.pixel_mean, cfg.pixel_std
    if bool(mean) != bool(std):
        raise ConfigError(f"model.pixel_mean and model.pixel_std go together (got {mean} and {std}): give both, "
                          "or neither (no normalisation)")
    if mean and (len(mean) != cfg.image_channels or len(std) != cfg.image_channels or min(std) <= 0):
        raise ConfigError(f"model.pixel_mean and model.pixel_std must hold {cfg.image_channels} numbers each (one per "
                          f"channel, model.image_channels), std > 0; got {mean} and {std}")


def build_speech(cfg: ModelConfig) -> SpeechTransformer:
    """The Transformer encoder-decoder over audio frames (Conformer encoder blocks with ``cfg.conformer``)."""
    if cfg.copy:
        raise ConfigError("model.copy=true copies source tokens, and a speech model's source is audio; remove it")
    if cfg.sample_rate <= 0:
        raise ConfigError("model.sample_rate must be set (> 0): the audio's rate in Hz (set by `seqmap train`)")
    n_fft, hop = round(cfg.sample_rate * cfg.window_ms / 1000), round(cfg.sample_rate * cfg.hop_ms / 1000)
    if n_fft < 8 or hop < 1:
        raise ConfigError(f"model.window_ms={cfg.window_ms} / hop_ms={cfg.hop_ms} at {cfg.sample_rate} Hz give "
                          f"windows of {n_fft} and hops of {hop} samples; lengthen them")
    if cfg.n_mels < 7:
        raise ConfigError(f"model.n_mels={cfg.n_mels} is too few for the 4x subsampling; use at least 7 (e.g. 40)")
    frontend = AudioFrontEnd(cfg.sample_rate, n_fft, hop, cfg.n_mels, cfg.conv_channels, cfg.d_model,
                             tuple(cfg.spec_augment) or (0, 0, 0, 0))
    if cfg.conformer:
        layers = [ConformerLayer(_attention(cfg), _ff(cfg), _ff(cfg), ConvModule(cfg.d_model, cfg.conv_kernel,
                                                                                 cfg.dropout),
                                 cfg.d_model, cfg.dropout) for _ in range(cfg.enc_layers)]
        encoder_norm = nn.Identity()  # every Conformer block ends with its own norm
    else:
        layers, encoder_norm = [_encoder_layer(cfg, causal=False) for _ in range(cfg.enc_layers)], _final_norm(cfg)
    encoder = TransformerEncoder(None, _positional(cfg, causal=False), layers, encoder_norm, cfg.dropout)
    tgt_embedding = TokenEmbedding(cfg.tgt_vocab, cfg.d_model, cfg.pad_id, cfg.scale_embeddings)
    decoder = TransformerDecoder(
        tgt_embedding, _positional(cfg, causal=True),
        [_decoder_layer(cfg) for _ in range(cfg.dec_layers)], _final_norm(cfg),
        _output(cfg, tgt_embedding), cfg.dropout)
    ctc_head = nn.Linear(cfg.d_model, cfg.tgt_vocab) if cfg.ctc_weight > 0 else None
    model = SpeechTransformer(frontend, encoder, decoder, ctc_head, cfg.ctc_weight)
    _init_linears(model)
    return model


def build_gat(cfg: ModelConfig) -> GAT:
    """The two-layer GAT: ``n_heads`` heads of ``d_model / n_heads`` features, ``out_heads`` averaged output heads."""
    if cfg.n_features <= 0:
        raise ConfigError("model.n_features must be set (> 0): input features per node (set from the graph)")
    if cfg.n_classes < 2:
        raise ConfigError(f"model.n_classes must be at least 2 (set from the graph's labels), got {cfg.n_classes}")
    return GAT(cfg.n_features, cfg.n_classes, hidden=cfg.d_model // cfg.n_heads, heads=cfg.n_heads,
               out_heads=cfg.out_heads, dropout=cfg.dropout, attn_dropout=cfg.attention_dropout)
