"""The model families: Transformer and RNN encoder-decoders, decoder-only Transformer and recurrent LMs.

All built by ``builder.build_model`` and speaking the protocol of ``protocol.py``.
"""
