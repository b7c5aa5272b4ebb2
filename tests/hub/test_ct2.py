"""``seqmap export ct2``: the hf export handed to CTranslate2's converter; its Translator and Generator decode
greedily as seqmap does (a tiny imported Marian and GPT-2), and runs CTranslate2 would misread are refused."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the hf extra is not installed: pip install -e \".[hf]\"")
ctranslate2 = pytest.importorskip("ctranslate2", reason="the ct2 extra is not installed: pip install -e \".[ct2]\"")
pytest.importorskip("sentencepiece")

from seqmap.config import DecodeConfig  # noqa: E402
from seqmap.decoding.text import generate_nbest, lm_prompt, translate_ids  # noqa: E402
from seqmap.hub import HubError, import_hf  # noqa: E402
from seqmap.hub.ct2 import export_ct2  # noqa: E402
from seqmap.runs import load_run  # noqa: E402

from .test_gpt2 import tiny_gpt2  # noqa: E402
from .test_marian import tiny_marian  # noqa: E402
from .test_marian_export import _trained  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_marian_translates_greedily_as_seqmap_does(tmp_path, capsys):
    from seqmap.cli import main

    hf, _ = tiny_marian(tmp_path, seed=9)
    with torch.no_grad():  # OPUS-MT's pad row is zero (Marian has no pad token); CTranslate2 relies on it
        hf.model.shared.weight[hf.config.pad_token_id] = 0.0
    hf.save_pretrained(tmp_path / "hf")
    import_hf(tmp_path / "hf", tmp_path / "run")
    assert main(["export", "ct2", str(tmp_path / "run"), "--out", str(tmp_path / "ct2")]) == 0
    assert "for CTranslate2" in capsys.readouterr().out
    run = load_run(tmp_path / "run")
    translator = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu", intra_threads=1)
    for text in ["the cat sat on the mat", "a dog met a cat", "where is the log", "the dog is on the mat"]:
        ids = run.src_tok.encode(text)
        theirs = translator.translate_batch([run.src_tok.pieces(ids)], beam_size=1, max_decoding_length=30,
                                            disable_unk=True)[0].hypotheses[0]
        ours = translate_ids(run.model, [ids], DecodeConfig(max_len_a=0.0, max_len_b=30))[0]
        assert run.tgt_tok.pieces(ours) == theirs, text
        assert len(ours) < 30  # ended with EOS, so the two length limits do not matter


def test_a_gpt2_generates_greedily_as_seqmap_does(tmp_path):
    _, fast = tiny_gpt2(tmp_path / "hf", seed=9)
    import_hf(tmp_path / "hf", tmp_path / "run")
    run = load_run(tmp_path / "run")
    export_ct2(run, tmp_path / "ct2")
    generator = ctranslate2.Generator(str(tmp_path / "ct2"), device="cpu", intra_threads=1)
    for prompt in ["the cat", "a dog met", "on the mat. the"]:
        ids = lm_prompt(run.tgt_tok, prompt)
        theirs = generator.generate_batch([run.tgt_tok.pieces(ids)], max_length=10, sampling_topk=1,
                                          include_prompt_in_result=False)[0].sequences[0]
        ours = generate_nbest(run.model, [ids], DecodeConfig(max_new_tokens=10))[0][0].output
        n = min(len(theirs), len(ours))
        assert n >= 5 and run.tgt_tok.pieces(ours)[:n] == theirs[:n], prompt


def test_runs_ctranslate2_would_misread_are_refused_in_one_line(tmp_path):
    run = _trained(tmp_path)
    with pytest.raises(HubError, match="pad token is not last .* export it with seqmap export hf instead"):
        export_ct2(run, tmp_path / "ct2")
    with pytest.raises(HubError, match="--quantization 'int3' is not one of CTranslate2's"):
        export_ct2(run, tmp_path / "ct2", quantization="int3")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(HubError, match="exists and is not empty"):
        export_ct2(run, tmp_path / "full")
