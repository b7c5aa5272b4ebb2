"""Text normalization (lowercasing, OpenCC), carried by tokenizers and applied to every split and reference."""

import json

import pytest

from seqmap.config import ConfigError, DataConfig, RunConfig, from_dict
from seqmap.data.normalize import IDENTITY, NormalizerError, TextNormalizer
from seqmap.data.pipeline import normalizer_for, tokenizers_for
from seqmap.data.tokenizers import UNK, UNK_SURFACE, TokenizerError, load_tokenizer, train_tokenizer
from seqmap.tasks.translation import read_translation_texts

TRADITIONAL = "這個問題很難。我們說過了嗎？"
SIMPLIFIED = "这个问题很难。我们说过了吗？"


def test_t2s_converts_to_simplified_and_is_idempotent():
    t2s = TextNormalizer(opencc="t2s")
    assert t2s(TRADITIONAL) == SIMPLIFIED
    assert t2s(SIMPLIFIED) == SIMPLIFIED
    assert t2s("Tom's book, 3 apples.") == "Tom's book, 3 apples."  # other scripts pass through


def test_lowercase_then_convert_and_identity():
    norm = TextNormalizer(lowercase=True, opencc="t2s")
    assert norm("Tom 說 HELLO") == "tom 说 hello"
    assert IDENTITY(TRADITIONAL + " ABC") == TRADITIONAL + " ABC"
    assert IDENTITY.identity and not norm.identity


def test_unknown_conversions_and_options_are_refused():
    with pytest.raises(NormalizerError, match="unknown OpenCC conversion 'x2y'.*t2s"):
        TextNormalizer(opencc="x2y")
    with pytest.raises(NormalizerError, match="unknown normalizer option"):
        TextNormalizer.from_dict({"opencc": "t2s", "nfkc": True})
    with pytest.raises(ConfigError, match="data.opencc = 'simplified' is not valid.*t2s"):
        from_dict(RunConfig, {"data": {"opencc": "simplified"}})


def test_a_tokenizer_applies_its_normalizer_and_keeps_it_when_saved(tmp_path):
    texts = [SIMPLIFIED, "我们去吧。", "这是什么？"] * 5
    tok = train_tokenizer("char", texts, normalizer=TextNormalizer(opencc="t2s"))
    assert tok.encode(TRADITIONAL) == tok.encode(SIMPLIFIED)
    assert UNK not in tok.encode(TRADITIONAL)
    assert tok.tokens(TRADITIONAL) == list(SIMPLIFIED)
    tok.save(tmp_path)
    assert json.loads((tmp_path / "tokenizer.json").read_text())["normalizer"] == {"lowercase": False,
                                                                                   "opencc": "t2s"}
    loaded = load_tokenizer(tmp_path)
    assert loaded.normalizer == tok.normalizer
    assert loaded.encode(TRADITIONAL) == tok.encode(SIMPLIFIED)
    plain = train_tokenizer("char", texts)
    assert plain.fingerprint() != tok.fingerprint()  # the token cache must not mix the two
    assert UNK in plain.encode(TRADITIONAL)


def test_a_bad_normalizer_in_a_manifest_names_the_file(tmp_path):
    train_tokenizer("char", ["abc"], normalizer=TextNormalizer(lowercase=True)).save(tmp_path)
    manifest = json.loads((tmp_path / "tokenizer.json").read_text())
    manifest["normalizer"] = {"opencc": "zz"}
    (tmp_path / "tokenizer.json").write_text(json.dumps(manifest))
    with pytest.raises(TokenizerError, match="tokenizer.json: unknown OpenCC conversion 'zz'"):
        load_tokenizer(tmp_path)


def _traditional_chars(texts):
    return sum(text.count(c) for text in texts for c in "們這個說嗎麼")


def test_bundled_tatoeba_in_one_script_on_every_split():
    raw = read_translation_texts(DataConfig(dataset="tatoeba-en-zh", src_lang="en", tgt_lang="zh"))
    simple = read_translation_texts(DataConfig(dataset="tatoeba-en-zh", src_lang="en", tgt_lang="zh", opencc="t2s"))
    for split in ("train", "valid", "test"):
        assert len(simple[split]) == len(raw[split])
        assert _traditional_chars(t for _, t in raw[split]) > 0  # the corpus mixes scripts ...
        assert _traditional_chars(t for _, t in simple[split]) == 0  # ... the option removes one
        assert [s for s, _ in simple[split]] == [s for s, _ in raw[split]]  # English is untouched


def test_file_data_is_normalized_on_both_sides_and_lowercase_still_applies(tmp_path):
    for split in ("train", "valid"):
        (tmp_path / f"{split}.tsv").write_text(f"Hello THERE\t{TRADITIONAL}\n", encoding="utf-8")
    cfg = DataConfig(train=str(tmp_path / "train.tsv"), valid=str(tmp_path / "valid.tsv"), lowercase=True,
                     opencc="t2s")
    texts = read_translation_texts(cfg)
    assert texts["train"] == [("hello there", SIMPLIFIED)] and texts["valid"] == texts["train"]
    assert normalizer_for(cfg) == TextNormalizer(lowercase=True, opencc="t2s")


def test_sentencepiece_options_reach_the_tokenizer_and_byte_fallback_is_the_default(tmp_path):
    cfg = DataConfig(tokenizer="bpe", vocab_size=300, opencc="t2s")
    assert cfg.byte_fallback
    src = ["the cat sat on the mat 12345"] * 20
    tgt = [SIMPLIFIED] * 20
    tok, _ = tokenizers_for(cfg, src, tgt, tmp_path, log=lambda _: None)
    assert tok.options["byte_fallback"] is True and tok.options["split_digits"] is False
    unseen = "猫在垫子上 ok"  # characters the tokenizer never saw
    assert UNK not in tok.encode(unseen)
    assert tok.decode(tok.encode(unseen)) == unseen  # every character round-trips through bytes
    assert tok.decode(tok.encode(TRADITIONAL)) == SIMPLIFIED
    no_fallback = DataConfig(tokenizer="bpe", vocab_size=300, byte_fallback=False, split_digits=True)
    tok2, _ = tokenizers_for(no_fallback, src, tgt, tmp_path / "other", log=lambda _: None)
    assert UNK_SURFACE in tok2.decode(tok2.encode(unseen))
    assert [p.strip("▁") for p in tok2.tokens("12345") if p != "▁"] == list("12345")  # split_digits
    assert any(len(p.strip("▁")) > 1 for p in tok.tokens("12345"))  # merged without it


@pytest.mark.parametrize("kind", ["word", "char"])
def test_vocab_size_applies_to_counted_vocabularies(kind, tmp_path):
    texts = ["a a a b b c d e f g", "h i j k"] if kind == "word" else ["aaabbcdefg", "hijk"]
    tok, _ = tokenizers_for(DataConfig(tokenizer=kind, vocab_size=6), texts, texts, tmp_path, log=lambda _: None)
    assert tok.vocab_size == 6  # 4 specials + the 2 most frequent pieces
    if kind == "word":
        assert tok.encode("a b c") == [4, 5, UNK]
    else:
        assert tok.encode("ab") == [4, 5] and tok.encode("c") == [UNK]
