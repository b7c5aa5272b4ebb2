"""An empty source is not decoded: its translation is empty and in its place, whatever the search; and long
decoding shows a progress bar on a terminal only."""

import io

import pytest
import torch

from seqmap.config import DecodeConfig, ModelConfig
from seqmap.data.tokenizers import train_tokenizer
from seqmap.decoding.text import Scored, skip_empty, source_ids, translate_nbest
from seqmap.models.builder import build_model

TOK = train_tokenizer("char", ["a b c d e f g"])  # a character tokenizer reads a space as a token
TEXTS = ["a b c", "", "d e", "  ", "f"]


def make():
    torch.manual_seed(0)
    return build_model(ModelConfig(family="transformer", src_vocab=TOK.vocab_size, tgt_vocab=TOK.vocab_size,
                                   d_model=16, n_heads=2, d_ff=32, enc_layers=1, dec_layers=1, dropout=0.0)).eval()


class Spy:
    """Passes the protocol through and counts the source rows encoded."""

    def __init__(self, model):
        self.model, self.rows = model, 0

    def encode(self, src, src_mask):
        self.rows += src.size(0)
        return self.model.encode(src, src_mask)

    def decode_step(self, *args, **kw):
        return self.model.decode_step(*args, **kw)


def test_a_blank_text_has_no_source_tokens():
    assert TOK.encode("  ")  # the tokenizer alone would read the spaces
    assert source_ids(TOK, TEXTS) == [TOK.encode("a b c"), [], TOK.encode("d e"), [], TOK.encode("f")]
    assert source_ids(TOK, ["a b c"], max_src_len=2) == [TOK.encode("a b c")[:2]]


@pytest.mark.parametrize("options", [{}, {"beam_size": 3, "n_best": 2}, {"sample": True}, {"scores": False}],
                         ids=["greedy", "n-best", "sampling", "unscored"])
def test_empty_sources_are_not_decoded_and_keep_their_place(options):
    model, sources = make(), source_ids(TOK, TEXTS)
    decode = DecodeConfig(beam_size=options.pop("beam_size", 1))
    spy = Spy(model)
    out = translate_nbest(spy, sources, decode, prefixes=[TOK.encode("a")] * len(sources), **options)
    assert spy.rows == 3  # the three sentences, once each
    scored = options.get("scores", True) or decode.beam_size > 1
    nothing = Scored([], 0.0, 0.0) if scored else Scored([], None, None)
    assert out[1] == out[3] == [nothing]
    for i in (0, 2, 4):
        assert out[i] and all(e.output[:1] == TOK.encode("a") for e in out[i])  # decoded, with its prefix
    if not options.get("sample"):  # a sample's seed is its place, so only searches compare alone
        assert [out[i] for i in (0, 2, 4)] == translate_nbest(model, [sources[i] for i in (0, 2, 4)], decode,
                                                              prefixes=[TOK.encode("a")] * 3, **options)


def test_skip_empty_gives_a_whole_batch_decoder_the_sentences_only():
    seen = []

    def decode_rows(rows):
        seen.append(rows)
        return [[Scored(list(r), -1.0, -0.5)] for r in rows]

    out = skip_empty([[5], [], [6, 7], []], decode_rows)
    assert seen == [[[5], [6, 7]]]
    assert out == [[Scored([5], -1.0, -0.5)], [Scored([], 0.0, 0.0)], [Scored([6, 7], -1.0, -0.5)],
                   [Scored([], 0.0, 0.0)]]
    assert skip_empty([[], []], decode_rows, scores=False) == [[Scored([], None, None)]] * 2 and len(seen) == 1


class Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("stream, progress, shown", [(Terminal, True, True), (io.StringIO, True, False),
                                                     (Terminal, False, False)],
                         ids=["terminal", "file", "not asked"])
def test_progress_is_shown_on_a_terminal_only(monkeypatch, stream, progress, shown):
    err = stream()
    monkeypatch.setattr("sys.stderr", err)
    out = translate_nbest(make(), source_ids(TOK, TEXTS), DecodeConfig(max_tokens=8), progress=progress)
    assert len(out) == len(TEXTS)
    assert ("decoding:" in err.getvalue() and "/3 [" in err.getvalue()) == shown  # of the 3 sentences
