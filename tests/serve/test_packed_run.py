"""``load_run`` packs a run's Linear weights on the CPU (``seqmap.nn.packed``): same translations as unpacked."""

import pytest

from seqmap.decoding.text import translate_texts
from seqmap.nn.packed import PackedLinear, packing_available
from seqmap.runs import RunError, load_run


@pytest.mark.skipif(not packing_available(), reason="torch without oneDNN on x86-64: nothing to pack")
def test_loaded_runs_translate_through_packed_weights_as_they_do_unpacked(translation_run_dir):
    packed, plain = load_run(translation_run_dir), load_run(translation_run_dir, pack=False)
    assert any(type(m) is PackedLinear for m in packed.model.modules())
    assert not any(type(m) is PackedLinear for m in plain.model.modules())
    texts = ["a b c", "j i h g f e", "c c a", "b"]
    for beam in (1, 3):
        translations = [translate_texts(run.model, run.src_tok, run.tgt_tok, texts, run.cfg.decode, beam_size=beam)
                        for run in (packed, plain)]
        assert translations[0] == translations[1]


@pytest.mark.skipif(not packing_available(), reason="torch without oneDNN on x86-64: nothing to pack")
def test_an_unknown_packing_backend_in_the_environment_is_a_one_line_run_error(translation_run_dir, monkeypatch):
    monkeypatch.setenv("SEQMAP_PACKED_LINEAR", "openblas")
    with pytest.raises(RunError, match="SEQMAP_PACKED_LINEAR='openblas' is not a packed-Linear backend"):
        load_run(translation_run_dir)
    assert load_run(translation_run_dir, pack=False).model is not None  # unpacked runs never ask
