"""Long sources (summarization): data.max_src_len truncates and counts them, never drops them silently.

Without ``data.max_src_len`` a pair whose source exceeds ``data.max_len`` is dropped and counted (as
for translation); with it, every source is read up to its first ``max_src_len`` tokens, in every
split and in ``translate`` / ``evaluate`` alike, and ``data.max_len`` bounds only the target.
Positions: sinusoidal ones extend to any length; learned ones are checked against the longest
source when the config is read, and a longer input is one clear error.
"""

import pytest
import torch

from seqmap.config import ConfigError, DataConfig, ModelConfig, RunConfig
from seqmap.data.pipeline import truncate_source
from seqmap.decoding.text import translate_texts
from seqmap.models.builder import build_model
from seqmap.tasks.translation import load_translation


def _files(tmp_path):
    long = " ".join(f"w{i}" for i in range(30))
    rows = [f"{long}\tshort summary", "a b c\tabc", "d e f g\tdefg"]
    for split in ("train", "valid"):
        (tmp_path / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    return {s: str(tmp_path / f"{s}.tsv") for s in ("train", "valid")}


def test_max_src_len_truncates_and_counts_instead_of_dropping(tmp_path):
    log = []
    cfg = DataConfig(**_files(tmp_path), tokenizer="word", vocab_size=100, max_len=8, max_src_len=5)
    data = load_translation(cfg, tmp_path / "run", log.append)
    assert len(data.train) == 3 and len(data.valid) == 3  # nothing dropped
    assert [len(s) for s, _ in data.train] == [5, 3, 4]
    assert any("train: 1 of 3 sources longer than data.max_src_len=5 tokens (longest 30), truncated to their "
               "first 5" in line for line in log)


def test_without_max_src_len_a_long_source_is_dropped_and_counted(tmp_path):
    log = []
    cfg = DataConfig(**_files(tmp_path), tokenizer="word", vocab_size=100, max_len=8)
    data = load_translation(cfg, tmp_path / "run", log.append)
    assert len(data.train) == 2
    assert any("train: kept 2 of 3 pairs; dropped 1 longer than 8 tokens (lines 1)" in line for line in log)


def test_truncate_source():
    assert truncate_source([1, 2, 3], 2) == [1, 2] and truncate_source([1, 2, 3], 0) == [1, 2, 3]
    with pytest.raises(ConfigError, match="data.max_src_len must be >= 0"):
        DataConfig(max_src_len=-1)


def test_learned_positions_must_cover_the_longest_source():
    with pytest.raises(ConfigError, match=r"cannot cover max\(data.max_len, data.max_src_len\) \+ 1 \(BOS\) = 401"):
        RunConfig(model=ModelConfig(positional="learned", max_len=256), data=DataConfig(max_len=48, max_src_len=400))
    RunConfig(model=ModelConfig(positional="learned", max_len=401), data=DataConfig(max_len=48, max_src_len=400))


def test_a_source_beyond_learned_positions_is_one_clear_error_and_sinusoidal_ones_extend():
    learned = build_model(ModelConfig(src_vocab=20, tgt_vocab=20, d_model=16, n_heads=2, d_ff=32, enc_layers=1,
                                      dec_layers=1, positional="learned", max_len=8)).eval()
    src = torch.randint(4, 20, (1, 12))
    with pytest.raises(ValueError, match="learned positions stop at model.max_len=8") as error:
        learned.encode(src, None)
    assert "\n" not in str(error.value)
    sinusoidal = build_model(ModelConfig(src_vocab=20, tgt_vocab=20, d_model=16, n_heads=2, d_ff=32, enc_layers=1,
                                         dec_layers=1, max_len=8, copy=True, share_vocab=True)).eval()
    assert torch.isfinite(sinusoidal.encode(torch.randint(4, 20, (1, 500)), None).states).all()


def test_translate_reads_only_the_first_max_src_len_tokens(tmp_path):
    """A source longer than max_src_len decodes exactly as its first max_src_len tokens."""
    cfg = DataConfig(**_files(tmp_path), tokenizer="word", vocab_size=100, max_len=8, max_src_len=5)
    data = load_translation(cfg, tmp_path / "run", lambda line: None)
    torch.manual_seed(0)
    model = build_model(ModelConfig(src_vocab=data.src_tok.vocab_size, tgt_vocab=data.tgt_tok.vocab_size,
                                    d_model=16, n_heads=2, d_ff=32, enc_layers=1, dec_layers=1)).eval()
    long = " ".join(f"w{i}" for i in range(30))
    head = " ".join(f"w{i}" for i in range(5))
    kw = dict(max_len_a=0.0, max_len_b=4)
    assert translate_texts(model, data.src_tok, data.tgt_tok, [long], max_src_len=5, **kw) == \
        translate_texts(model, data.src_tok, data.tgt_tok, [head], **kw)
