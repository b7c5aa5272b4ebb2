"""Primitives: attention functions, positional encodings and the layers built from them."""
