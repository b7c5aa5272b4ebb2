"""The model families: RNN encoder-decoder, Transformer encoder-decoder, decoder-only LM."""
