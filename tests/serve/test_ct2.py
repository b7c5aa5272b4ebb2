"""``seqmap serve RUN --ct2 DIR``: /translate searches with the run's CTranslate2 export, and so do an LM's
greedy /generate requests; their outputs, n-best scores and attention are those of the run served by seqmap
itself, sampled /generate requests are seqmap's; what cannot work is refused in one line (the command) or a
422 (a text, or a prompt and its new tokens, past the export's positions)."""

import dataclasses

import pytest
import torch
import uvicorn
from fastapi.testclient import TestClient

pytest.importorskip("ctranslate2", reason="the ct2 extra is not installed: pip install -e \".[ct2]\"")

from seqmap.data.tokenizers import BOS, EOS, NEVER_GENERATED  # noqa: E402
from seqmap.decoding.ranking import gnmt_penalty  # noqa: E402
from seqmap.hub.ct2 import export_ct2, load_generator, load_translator  # noqa: E402
from seqmap.serve import main  # noqa: E402
from seqmap.serve.app import create_app  # noqa: E402
from seqmap.serve.engine import Engine, GenerateJob, GenerateKey  # noqa: E402

from .test_command import parse  # noqa: E402

TEXTS = ["a b c", "j i h g", "c c d e f a", "b"]


@pytest.fixture(scope="module")
def ct2_dir(translation_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("serve_ct2") / "ct2"
    export_ct2(translation_run, out)
    return out


def served_with(run_dir, ct2_dir):
    """The app ``seqmap serve RUN --ct2 DIR --threads 1`` starts (through the command, as a user starts it)."""
    served = {}
    uvicorn_run = uvicorn.run
    uvicorn.run = lambda app, **kwargs: served.update(app=app)
    try:
        assert main(parse(["serve", str(run_dir), "--ct2", str(ct2_dir), "--threads", "1"])) == 0
    finally:
        uvicorn.run = uvicorn_run
    return served["app"]


@pytest.fixture(scope="module")
def clients(translation_run, translation_run_dir, ct2_dir):
    """The run served by seqmap, and by its export."""
    with TestClient(create_app(translation_run, wait_ms=2)) as ours, \
            TestClient(served_with(translation_run_dir, ct2_dir)) as theirs:
        yield ours, theirs


def test_greedy_translations_are_seqmaps(clients):
    ours, theirs = clients
    body = {"text": TEXTS}
    expected = ours.post("/translate", json=body).json()["translations"]
    got = theirs.post("/translate", json=body).json()["translations"]
    assert [r["translation"] for r in got] == [r["translation"] for r in expected]
    for mine, other in zip(expected, got):  # seqmap's greedy search scores too, when asked for n-best
        assert other["nbest"][0]["text"] == mine["nbest"][0]["text"]


def _seqmap_score(run, text: str, output: str) -> float:
    """seqmap's score of an output: the sum of its tokens' log-probabilities and EOS's, PAD/BOS/UNK banned."""
    src, out = run.src_tok.encode(text), run.tgt_tok.encode(output)
    with torch.no_grad():
        logits = run.model(torch.tensor([src]), None, torch.tensor([[BOS, *out]]))[0]
    log_probs = logits.index_fill(-1, torch.tensor(NEVER_GENERATED), float("-inf")).log_softmax(-1)
    return float(log_probs.gather(1, torch.tensor([*out, EOS])[:, None]).sum())


def test_nbest_scores_are_seqmaps(clients, translation_run):
    """Beam search ranks and stops by CTranslate2's rule (its lists can differ from seqmap's); each entry's
    score and normalized score are what seqmap gives that output."""
    _, theirs = clients
    run = translation_run
    body = {"text": TEXTS, "beam_size": 3, "n_best": 2, "length_penalty": 0.6}
    got = theirs.post("/translate", json=body).json()["translations"]
    for text, result in zip(TEXTS, got, strict=True):
        assert len(result["nbest"]) == 2 and result["translation"] == result["nbest"][0]["text"]
        for entry in result["nbest"]:
            score = _seqmap_score(run, text, entry["text"])
            length = len(run.tgt_tok.encode(entry["text"])) + 1  # EOS counted
            assert entry["score"] == pytest.approx(score, abs=2e-4)
            assert entry["normalized"] == pytest.approx(score / gnmt_penalty(length, 0.6), abs=2e-4)


def test_attention_comes_from_the_run(clients):
    ours, theirs = clients
    body = {"text": "a b c d e", "attention": True}
    (mine,) = ours.post("/translate", json=body).json()["translations"]
    (other,) = theirs.post("/translate", json=body).json()["translations"]
    assert other["translation"] == mine["translation"] and other["attention"] == mine["attention"]


def test_info_names_the_decoder(clients, ct2_dir):
    ours, theirs = clients
    assert ours.get("/info").json()["decoder"] == "seqmap"
    assert theirs.get("/info").json()["decoder"] == f"CTranslate2 ({ct2_dir}, float32)"


def test_a_text_past_the_exports_positions_is_a_422(translation_run, tmp_path):
    """An export with 12 positions: a text whose output could need 13 is refused before the batch (where
    CTranslate2 would fail every request that shares it)."""
    run = dataclasses.replace(translation_run, cfg=dataclasses.replace(
        translation_run.cfg, model=dataclasses.replace(translation_run.cfg.model, max_len=12)))
    export_ct2(run, tmp_path / "ct2")  # max_len_a 1, max_len_b 5: 7 words fit, 8 do not
    translator = load_translator(tmp_path / "ct2", threads=1)
    with TestClient(create_app(run, ct2=translator, decoder="CTranslate2", wait_ms=2)) as client:
        response = client.post("/translate", json={"text": ["a b", "a b c d e f g h"]})
        assert response.status_code == 422
        assert response.json() == {"detail": "text 1 could need 13 positions; this server's CTranslate2 export "
                                             "has 12 (model.max_len): send a shorter text", "field": "text"}
        assert client.post("/translate", json={"text": "a b c d e f g"}).status_code == 200


@pytest.mark.parametrize("run_fixture, extra, words", [
    ("text_classifier_run_dir", [], "--ct2 searches for Transformer translation runs and decoder-only LMs; "),
    ("translation_run_dir", ["--device", "cuda"], "--ct2 runs CTranslate2 on the CPU; leave out --device cuda"),
    ("translation_run_dir", [], "holds no CTranslate2 model (no model.bin); write one with seqmap export ct2"),
])
def test_what_cannot_work_is_a_one_line_error(request, tmp_path, capsys, run_fixture, extra, words):
    run_dir = request.getfixturevalue(run_fixture)
    assert main(parse(["serve", str(run_dir), "--ct2", str(tmp_path), *extra])) == 2  # tmp_path: no model
    err = capsys.readouterr().err
    assert err.startswith("seqmap: error: ") and words in err and err.count("\n") == 1


def test_evaluate_refuses_ct2_for_other_tasks(lm_run_dir, tmp_path, capsys):
    """`seqmap evaluate --ct2` on a run it cannot decode says so (it was ignored for classifiers and speech)."""
    from seqmap.cli import main as cli_main

    (tmp_path / "valid.txt").write_text("to be or not to be\n")
    assert cli_main(["evaluate", str(lm_run_dir), "--data", str(tmp_path / "valid.txt"), "--ct2", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == f"seqmap: error: --ct2 is for translation runs; {lm_run_dir} is a language model: leave out --ct2\n"


PROMPTS = ["to be", "that is the q", "", "or not"]


@pytest.fixture(scope="module")
def lm_clients(lm_run, lm_run_dir, tmp_path_factory):
    """The LM served by seqmap, and with its export."""
    out = tmp_path_factory.mktemp("serve_ct2_lm") / "ct2"
    export_ct2(lm_run, out)
    with TestClient(create_app(lm_run, wait_ms=2)) as ours, TestClient(served_with(lm_run_dir, out)) as theirs:
        yield ours, theirs, out


def test_an_lms_greedy_generations_are_seqmaps_and_samples_stay_seqmaps(lm_clients):
    ours, theirs, out = lm_clients
    for prompt in PROMPTS:
        for body in ({"prompt": prompt, "sample": False, "max_new_tokens": 12, "attention": True},
                     {"prompt": prompt, "seed": 5, "temperature": 2.0}):  # sampled: seqmap's seeded sampler
            assert theirs.post("/generate", json=body).json() == ours.post("/generate", json=body).json(), body
    assert theirs.get("/info").json()["decoder"] == f"CTranslate2 ({out}, float32)"


def test_a_greedy_batch_of_unequal_prompts_is_decoded_as_each_alone(lm_run, lm_clients):
    generator = load_generator(lm_clients[2], threads=1)
    ct2, seqmap = Engine(lm_run, ct2=generator), Engine(lm_run)
    key = GenerateKey("generate", 10, False, None, None, None)
    jobs = [GenerateJob(p, seqmap.prompt_ids(p), 0, False) for p in PROMPTS]
    assert ct2.run_generate(key, jobs) == seqmap.run_generate(key, jobs)
    assert [ct2.run_generate(key, [job])[0] for job in jobs] == ct2.run_generate(key, jobs)


def test_a_greedy_prompt_past_an_lm_exports_positions_is_a_422(lm_run, tmp_path):
    run = dataclasses.replace(lm_run, cfg=dataclasses.replace(
        lm_run.cfg, model=dataclasses.replace(lm_run.cfg.model, max_len=20)))  # a table of 20 positions
    export_ct2(run, tmp_path / "ct2")
    with TestClient(create_app(run, ct2=load_generator(tmp_path / "ct2", threads=1), wait_ms=2)) as client:
        body = {"prompt": "to be or not", "sample": False, "max_new_tokens": 9}  # 12 characters + 9 > 20
        response = client.post("/generate", json=body)
        assert response.status_code == 422
        assert response.json() == {"detail": "a prompt of 12 tokens and 9 new tokens pass this server's CTranslate2 "
                                             "export's 20 positions (model.max_len): ask for at most 8 new tokens, "
                                             "or a shorter prompt", "field": "max_new_tokens"}
        assert client.post("/generate", json={**body, "max_new_tokens": 8}).status_code == 200
        assert client.post("/generate", json={**body, "sample": True}).status_code == 200  # seqmap samples


def test_a_run_that_decodes_with_no_repeat_ngram_is_refused_before_serving(translation_run, ct2_dir):
    """CTranslate2 is not given ``no_repeat_ngram``: every search would fail in the worker, so the command
    refuses it in one line before it serves (it answered 500 to each request)."""
    import argparse

    from seqmap.serve import ServeError, _ct2_export

    cfg = translation_run.cfg
    run = dataclasses.replace(translation_run, cfg=dataclasses.replace(
        cfg, decode=dataclasses.replace(cfg.decode, no_repeat_ngram=3)))
    args = argparse.Namespace(ct2=str(ct2_dir), run_dir="runs/x", quantize="none")
    with pytest.raises(ServeError, match=r"runs/x decodes with decode.no_repeat_ngram=3, which CTranslate2 is not "
                                         r"given: leave out --ct2"):
        _ct2_export(args, run)
    assert _ct2_export(args, translation_run)[1] == f"CTranslate2 ({ct2_dir}, float32)"
