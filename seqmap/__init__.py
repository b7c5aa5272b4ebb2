"""seqmap: sequence models and attention, everything is a mapping.

A sequence goes in, a sequence comes out. The package is laid out in the order a
reader meets the ideas: attention and positional primitives (``seqmap.nn``), then
layers, then the model families (``seqmap.models``), with decoding, data, training
and the command line as consumers on top.

Shape legend (used in every docstring and shape comment)
--------------------------------------------------------
    B   batch size
    S   source length (keys/values of cross-attention)
    T   target length (queries; keys/values of self-attention)
    H   number of attention (query) heads
    Hkv number of key/value heads (H for multi-head, 1 for multi-query,
        a divisor of H for grouped-query attention)
    D   model width (d_model)
    Dh  width of one head (D // H)
    F   feed-forward width (d_ff)
    E   embedding width of the RNN and ConvS2S families (emb_size)
    C   channels of a convolution (ConvS2S: hidden_size)
    V   vocabulary size
    L   number of layers

Mask convention (one, everywhere)
---------------------------------
Masks are boolean and **True means "may attend"** (for a key) or "is a real token"
(for a padding mask over a sequence). A query row whose mask is all False attends
to nothing and its output is exactly zero, never NaN.

This matches ``torch.nn.functional.scaled_dot_product_attention`` (a True entry
"takes part in attention") but is the *opposite* of ``torch.nn.MultiheadAttention``
and ``torch.nn.Transformer*`` (``key_padding_mask`` True means "ignore"). Convert
with ``~mask`` when crossing that border.
"""

__version__ = "0.1.0"
