"""Tokenizers: round trips, the fixed special ids, vocabulary sizes, save/load, errors."""

import json
from pathlib import Path

import pytest

from seqmap.data.tokenizers import (
    BOS,
    EOS,
    MANIFEST,
    PAD,
    SPECIAL_PIECES,
    TOKENIZER_KINDS,
    UNK,
    UNK_SURFACE,
    Tokenizer,
    TokenizerError,
    load_pair,
    load_tokenizer,
    save_pair,
    train_pair,
    train_tokenizer,
)

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"

ENGLISH = [
    "The quick brown fox jumps over the lazy dog.",
    "A man is sleeping in a green room on a couch.",
    "Two young girls are playing with a red ball in the park.",
    "She said: \"It's 3 o'clock, isn't it?\"",
    "Several people are waiting for the bus at night.",
    "A dog runs through the grass with a stick in its mouth.",
] * 10
CHINESE = [
    "我爱北京天安门。",
    "你好，世界！",
    "他们在公园里踢足球。",
    "这本书很有意思，你读过吗？",
    "今天天气很好，我们去散步吧。",
    "一只狗在草地上跑。",
] * 10
SUBWORD = ("bpe", "unigram")


def train(kind: str, texts: list[str], vocab_size: int | None = 120, **options) -> Tokenizer:
    return train_tokenizer(kind, texts, vocab_size, **options)


@pytest.mark.parametrize("kind", ["char", *SUBWORD])
@pytest.mark.parametrize("texts", [ENGLISH, CHINESE], ids=["english", "chinese"])
def test_round_trip(kind, texts):
    tok = train(kind, ENGLISH + CHINESE, 200)
    for text in texts[:6] + ["你好 world, the dog。"]:
        ids = tok.encode(text)
        assert tok.decode(ids) == text
        assert len(tok.tokens(text)) == len(ids)
        assert len(tok.pieces(ids)) == len(ids)


def test_chinese_punctuation_is_not_normalised():
    tok = train("bpe", CHINESE + ["（好）"], 120)
    text = "你好，世界！（很好）"
    assert tok.decode(tok.encode(text)) == text  # NFKC would give "你好,世界!(很好)"
    assert "，" in "".join(tok.tokens(text))


@pytest.mark.parametrize("kind", SUBWORD)
def test_sentencepiece_whitespace(kind):
    messy = "  The  dog\truns.  "
    texts = ENGLISH + ["a\tb"]  # the tab must be a known character
    collapsing = train(kind, texts, 100)
    assert collapsing.decode(collapsing.encode(messy)) == "The dog\truns."  # spaces stripped/collapsed, tab kept
    keeping = train(kind, texts, 100, remove_extra_whitespaces=False)
    assert keeping.decode(keeping.encode(messy)) == messy


def test_word_round_trip_joins_with_single_spaces():
    tok = train("word", ENGLISH, None)
    assert tok.decode(tok.encode(ENGLISH[1])) == ENGLISH[1]
    assert tok.decode(tok.encode("  the   dog\truns ")) == "the dog runs"
    assert tok.tokens("the  dog") == ["the", "dog"]


@pytest.mark.parametrize("kind", TOKENIZER_KINDS)
def test_special_ids(kind):
    tok = train(kind, ENGLISH + CHINESE, 200)
    assert (PAD, BOS, EOS, UNK) == (0, 1, 2, 3)
    assert tok.pieces([PAD, BOS, EOS, UNK]) == list(SPECIAL_PIECES)
    ids = tok.encode("the dog")
    assert ids and min(ids) >= 4, "encode adds no BOS/EOS and never emits PAD"
    # decode skips PAD/BOS/EOS anywhere (it does not stop at EOS)
    assert tok.decode([BOS, *ids, EOS, *ids, PAD, PAD]) == tok.decode(ids + ids)
    # a literal special piece in the text is not the control id
    assert not {PAD, BOS, EOS} & set(tok.encode("<s> </s> <pad>"))


@pytest.mark.parametrize("kind", ["char", "word"])
def test_unknown_pieces_are_unk(kind):
    tok = train(kind, ENGLISH, None)
    text = "the Ω dog" if kind == "word" else "the Ωdog"
    ids = tok.encode(text)
    assert ids.count(UNK) == 1
    assert UNK_SURFACE in tok.decode(ids)
    assert "Ω" in tok.tokens(text)  # tokens keep the surface for plots


def test_sentencepiece_unknown_char_and_byte_fallback():
    plain = train("bpe", ENGLISH, 100)
    assert UNK in plain.encode("dog Ω")
    assert plain.decode(plain.encode("dog Ω")) == f"dog {UNK_SURFACE}"
    fallback = train("bpe", ENGLISH, 400, byte_fallback=True)
    assert UNK not in fallback.encode("dog Ω")
    assert fallback.decode(fallback.encode("dog Ω")) == "dog Ω"


@pytest.mark.parametrize("kind", ["char", "word"])
def test_vocab_size_and_min_freq_limit_counted_vocabularies(kind):
    texts = ["a a a b b c", "a b d"]
    if kind == "char":
        texts = [t.replace(" ", "") for t in texts]
    full = train(kind, texts, None)
    assert full.vocab_size == 4 + 4
    assert train(kind, texts, 6).vocab_size == 6
    assert train(kind, texts, 6).encode("a b c d".replace(" ", "" if kind == "char" else " "))[2:] == [UNK, UNK]
    assert train(kind, texts, None, min_freq=2).vocab_size == 4 + 2


@pytest.mark.parametrize("kind", SUBWORD)
def test_sentencepiece_vocab_size_is_honoured(kind):
    assert 72 <= train(kind, ENGLISH, 80).vocab_size <= 80  # unigram may stop a few pieces short
    small = train(kind, ["a b", "b a"], 1000)  # a soft limit: a tiny corpus gives fewer pieces, no error
    assert 4 < small.vocab_size < 1000


@pytest.mark.parametrize("kind", TOKENIZER_KINDS)
def test_save_load_gives_identical_encodings(kind, tmp_path):
    tok = train(kind, ENGLISH + CHINESE, 150)
    manifest = tok.save(tmp_path / "tok")
    assert manifest == tmp_path / "tok" / MANIFEST
    assert json.loads(manifest.read_text())["kind"] == kind
    for where in (tmp_path / "tok", manifest):
        loaded = load_tokenizer(where)
        assert type(loaded) is type(tok) and loaded.kind == kind
        assert loaded.vocab_size == tok.vocab_size
        assert loaded.fingerprint() == tok.fingerprint()
        for text in ENGLISH[:6] + CHINESE[:6]:
            assert loaded.encode(text) == tok.encode(text)
    if kind in SUBWORD:
        assert (tmp_path / "tok" / "spm.model").is_file()


def test_fingerprint_differs_between_tokenizers():
    assert train("char", ENGLISH).fingerprint() != train("char", CHINESE).fingerprint()
    assert train("bpe", ENGLISH, 80).fingerprint() != train("bpe", ENGLISH, 90).fingerprint()


def test_train_pair_joint_and_separate(tmp_path):
    src, tgt = train_pair("bpe", ENGLISH, CHINESE, 150)
    assert src is tgt
    assert UNK not in src.encode(ENGLISH[0]) + src.encode(CHINESE[0])
    save_pair(src, tgt, tmp_path / "joint")
    a, b = load_pair(tmp_path / "joint")
    assert a is b and a.encode(CHINESE[0]) == src.encode(CHINESE[0])

    src, tgt = train_pair("char", ENGLISH, CHINESE, joint=False)
    assert src is not tgt and UNK in src.encode(CHINESE[0]) and UNK not in tgt.encode(CHINESE[0])
    save_pair(src, tgt, tmp_path / "separate")
    a, b = load_pair(tmp_path / "separate")
    assert a.encode(ENGLISH[0]) == src.encode(ENGLISH[0]) and b.encode(CHINESE[0]) == tgt.encode(CHINESE[0])


def test_missing_manifest_names_the_path(tmp_path):
    with pytest.raises(TokenizerError, match=str(tmp_path / "nowhere" / MANIFEST)):
        load_tokenizer(tmp_path / "nowhere")
    with pytest.raises(TokenizerError, match="no tokenizers in"):
        load_pair(tmp_path)


def test_missing_model_file_names_the_path(tmp_path):
    train("unigram", ENGLISH, 80).save(tmp_path)
    (tmp_path / "spm.model").unlink()
    with pytest.raises(TokenizerError, match=str(tmp_path / "spm.model")):
        load_tokenizer(tmp_path)


def test_unknown_kind_lists_the_valid_ones(tmp_path):
    with pytest.raises(TokenizerError, match="'bpee'; did you mean 'bpe'.*char, word, bpe, unigram"):
        train_tokenizer("bpee", ENGLISH, 100)
    (tmp_path / MANIFEST).write_text(json.dumps({"kind": "wordpiece"}))
    with pytest.raises(TokenizerError, match="'wordpiece'.*valid: char, word, bpe, unigram"):
        load_tokenizer(tmp_path)


def test_training_errors_say_what_to_change():
    with pytest.raises(TokenizerError, match="did you mean 'character_coverage'"):
        train_tokenizer("bpe", ENGLISH, 100, char_coverage=0.9995)
    with pytest.raises(TokenizerError, match="needs a vocab_size"):
        train_tokenizer("unigram", ENGLISH)
    with pytest.raises(TokenizerError, match=r"vocab_size=10\).*Raise vocab_size.*character_coverage"):
        train_tokenizer("bpe", CHINESE, 10)
    with pytest.raises(TokenizerError, match="training text is empty"):
        train_tokenizer("unigram", [], 100)
    with pytest.raises(TokenizerError, match="training text is empty"):
        train_tokenizer("char", [""])


@pytest.mark.parametrize("kind, vocab_size, options, message", [
    ("word", 3, {}, r"vocab_size=3 leaves no room for pieces after the 4 specials; set vocab_size > 4"),
    ("char", 4, {}, r"vocab_size=4 leaves no room"),
    ("word", None, {"min_freq": 0}, r"min_freq must be >= 1, got 0"),
    ("bpe", 4, {}, r"bpe tokenizer needs vocab_size > 4, got 4"),
    ("unigram", 100, {"character_coverage": 0.0}, r"character_coverage must be in \(0, 1\], got 0.0"),
])
def test_sizes_that_leave_no_vocabulary_are_refused(kind, vocab_size, options, message):
    with pytest.raises(TokenizerError, match=message):
        train(kind, ENGLISH, vocab_size, **options)


def _damage(directory: Path, name: str, content: str) -> None:
    (directory / name).write_text(content)


@pytest.mark.parametrize("kind, name, content, message", [
    ("word", MANIFEST, "{not json", r"tokenizer.json: not a valid tokenizer manifest \("),
    ("word", MANIFEST, "[1, 2]", r"tokenizer.json: the manifest has no 'kind' \(valid: char, word, bpe, unigram\)"),
    ("word", MANIFEST, '{"kind": "word", "format": 99}', r"format 99 is newer than this seqmap reads \(1\); "
                                                         "upgrade seqmap"),
    ("word", "vocab.json", "{oops", r"vocab.json: not a JSON list of pieces \(.*\); save the tokenizer again"),
    ("char", "vocab.json", '["a", "b", "c", "d", "e"]', r"a char vocabulary must start with \['<pad>', '<s>', "
                                                        r"'</s>', '<unk>'\], got \['a', 'b', 'c', 'd'\]; was the "
                                                        "vocab file edited"),
    ("bpe", "spm.model", "not a model", r"spm.model: not a sentencepiece model \(.*\); save the tokenizer again"),
])
def test_a_damaged_saved_tokenizer_is_one_line_naming_the_file(tmp_path, kind, name, content, message):
    """What a run directory holds can be edited or truncated; loading it names the file and what to do."""
    train(kind, ENGLISH, 60 if kind == "bpe" else None).save(tmp_path)
    _damage(tmp_path, name, content)
    with pytest.raises(TokenizerError, match=message) as e:
        load_tokenizer(tmp_path)
    assert "\n" not in str(e.value)


def test_decode_rejects_ids_outside_the_vocabulary():
    tok = train("char", ENGLISH)
    with pytest.raises(TokenizerError, match=f"token id {tok.vocab_size} is outside"):
        tok.decode([5, tok.vocab_size])


@pytest.mark.skipif(not (SHARED_DATA / "tatoeba_cmn_eng").is_dir(), reason=f"shared corpora absent: {SHARED_DATA}")
def test_real_chinese_text_round_trips():
    with open(SHARED_DATA / "tatoeba_cmn_eng" / "cmn.txt", encoding="utf-8") as f:
        lines = [next(f).split("\t")[1] for _ in range(2000)]
    tok = train_tokenizer("unigram", lines, 2000, character_coverage=0.9995)
    assert tok.vocab_size <= 2000
    for line in lines[::50]:
        ids = tok.encode(line)
        if UNK not in ids:  # characters cut by coverage become UNK
            assert tok.decode(ids) == line
