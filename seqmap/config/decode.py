"""The ``decode`` section: how `translate`, `evaluate` and validation decode, and the ranges beyond which
decoding has no meaning."""

from __future__ import annotations

from dataclasses import dataclass, field

from seqmap.config_io import ConfigError, check_choice, check_positive, check_types

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
            check_positive("decode", name, getattr(self, name))
        if not MIN_TEMPERATURE <= self.temperature <= MAX_TEMPERATURE:
            raise ConfigError(f"decode.temperature must be in [{MIN_TEMPERATURE:g}, {MAX_TEMPERATURE:g}], "
                              f"got {self.temperature}")
        if not MIN_TOP_P <= self.top_p <= 1.0:
            raise ConfigError(f"decode.top_p must be in [{MIN_TOP_P:g}, 1] (1 = off), got {self.top_p}")
        check_choice("decode", "beam_ranking", self.beam_ranking, ("gnmt", "hf"))
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
