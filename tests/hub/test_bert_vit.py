"""Tiny random BERT and ViT classifiers saved by ``transformers`` import with one call and classify as they do:
logits agree to 1e-5 and ``seqmap classify`` names the same top class."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the hf extra is not installed: pip install -e \".[hf]\"")
tokenizers = pytest.importorskip("tokenizers", reason="the hf extra is not installed: pip install -e \".[hf]\"")

from seqmap.data.pipeline import classification_ids  # noqa: E402
from seqmap.hub import HubError, import_hf  # noqa: E402
from seqmap.runs import load_run  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
TEXTS = ["the cat sat on the mat", "a dog met a cat by the log", "where is the station?", "zebra"]
LABELS = {0: "negative", 1: "neutral", 2: "positive"}


def tiny_bert(directory, seed: int = 0, head: bool = True):
    """A WordPiece vocabulary trained on a few lines, and a random 2-layer BERT classifier over it."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(TEXTS * 5, trainers.WordPieceTrainer(
        vocab_size=80, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
                                                       special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    fast = transformers.BertTokenizerFast(tokenizer_object=tok, cls_token="[CLS]", sep_token="[SEP]",
                                          pad_token="[PAD]", unk_token="[UNK]", mask_token="[MASK]")
    torch.manual_seed(seed)
    config = transformers.BertConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
                                     num_labels=3, id2label=LABELS, label2id={v: k for k, v in LABELS.items()},
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = (transformers.BertForSequenceClassification(config) if head else transformers.BertModel(config)).eval()
    with torch.no_grad():  # random BERT weights (std 0.02) give nearly equal logits; widen them
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(10.0)
    model.save_pretrained(directory)
    fast.save_pretrained(directory)
    return model, fast


def tiny_vit(directory, seed: int = 0, channels: int = 3):
    torch.manual_seed(seed)
    config = transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                    image_size=16, patch_size=4, num_channels=channels, num_labels=3,
                                    id2label=LABELS, label2id={v: k for k, v in LABELS.items()},
                                    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = transformers.ViTForImageClassification(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.mul_(10.0)
    processor = transformers.ViTImageProcessor(size={"height": 16, "width": 16}, image_mean=[0.4] * channels,
                                               image_std=[0.3] * channels)
    model.save_pretrained(directory)
    processor.save_pretrained(directory)
    return model, processor


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    root = tmp_path_factory.mktemp("bert")
    hf, fast = tiny_bert(root / "hf")
    import_hf(root / "hf", root / "run")
    return hf, fast, load_run(root / "run"), root


@pytest.fixture(scope="module")
def vit(tmp_path_factory):
    root = tmp_path_factory.mktemp("vit")
    hf, processor = tiny_vit(root / "hf")
    import_hf(root / "hf", root / "run")
    return hf, processor, load_run(root / "run"), root


def test_bert_tokenizer_agrees_with_transformers(bert):
    _, fast, run, _ = bert
    for text in TEXTS:
        ids = run.src_tok.encode(text)
        assert [run.src_tok.to_hf(i) for i in ids] == fast(text)["input_ids"][1:]  # [CLS] is the class vector
        assert run.src_tok.decode(ids) == fast.decode(fast(text)["input_ids"], skip_special_tokens=True)


def test_bert_logits_agree(bert):
    hf, fast, run, _ = bert
    assert run.labels.names == ("negative", "neutral", "positive")
    enc = fast(TEXTS, padding=True, return_tensors="pt")
    rows = [classification_ids(run.src_tok, t, run.cfg.data.max_len) for t in TEXTS]
    width = max(map(len, rows))
    src = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    with torch.no_grad():
        theirs = hf(**enc).logits
        ours = run.model(src, src != 0)
    assert theirs.std() > 0.1  # logits that tell the classes apart
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)


def test_seqmap_classify_gives_the_same_top_class(bert, capsys):
    from seqmap.cli import main

    hf, fast, _, root = bert
    with torch.no_grad():
        expected = [LABELS[int(hf(**fast(t, return_tensors="pt")).logits.argmax())] for t in TEXTS]
    assert main(["classify", str(root / "run"), *TEXTS]) == 0
    assert [line.split("\t")[0] for line in capsys.readouterr().out.splitlines()] == expected


def test_seqmap_evaluate_scores_an_imported_bert_without_a_baseline(bert, tmp_path, capsys):
    from seqmap.cli import main

    hf, fast, _, root = bert
    with torch.no_grad():
        predicted = [LABELS[int(hf(**fast(t, return_tensors="pt")).logits.argmax())] for t in TEXTS]
    (tmp_path / "test.tsv").write_text("".join(f"{t}\t{label}\n" for t, label in zip(TEXTS, predicted)))
    assert main(["evaluate", str(root / "run"), "--data", str(tmp_path / "test.tsv")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("accuracy = 100.00") and "baseline" not in out  # no training rows to fit one on


def test_a_bert_model_without_head_imports_with_an_untrained_one(tmp_path):
    hf, fast = tiny_bert(tmp_path / "hf", seed=1, head=False)
    import_hf(tmp_path / "hf", tmp_path / "run")
    run = load_run(tmp_path / "run")
    ids = torch.tensor([run.src_tok.encode("the cat")])
    with torch.no_grad():
        pooled = hf(**fast("the cat", return_tensors="pt")).pooler_output
        states, mask, _ = run.model.encode(ids, None)
        torch.testing.assert_close(run.model.pooler(run.model.pool(states, mask)), pooled, rtol=0, atol=1e-5)
    trainer = json.loads(next((tmp_path / "run" / "checkpoints").glob("step-*/trainer.json")).read_text())
    assert trainer["trainer_state"]["untrained_head"] is True


def test_the_command_line_says_when_the_imported_head_is_untrained(tmp_path, capsys):
    from seqmap.cli import main

    tiny_bert(tmp_path / "hf", seed=1, head=False)
    assert main(["import", "hf", str(tmp_path / "hf"), "--out", str(tmp_path / "run")]) == 0
    assert capsys.readouterr().out.strip().endswith(
        f"(step-000000; its classification head is untrained: fine-tune it with seqmap train CONFIG --init "
        f"{tmp_path / 'run'})")
    tiny_bert(tmp_path / "hf2", seed=1)
    assert main(["import", "hf", str(tmp_path / "hf2"), "--out", str(tmp_path / "run2")]) == 0
    assert capsys.readouterr().out.strip().endswith("(step-000000)")


def test_vit_logits_agree(vit):
    hf, processor, run, _ = vit
    images = np.random.default_rng(0).integers(0, 256, size=(4, 16, 16, 3), dtype=np.uint8)
    pixel_values = processor(list(images), return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        theirs = hf(pixel_values=pixel_values).logits
        ours = run.model(torch.from_numpy(images).permute(0, 3, 1, 2).float(), None)
    assert theirs.std() > 0.1
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)


def test_seqmap_classify_names_the_same_class_for_an_image(vit, tmp_path, capsys):
    from PIL import Image

    from seqmap.cli import main

    hf, processor, _, root = vit
    paths, expected = [], []
    for i, image in enumerate(np.random.default_rng(1).integers(0, 256, size=(3, 16, 16, 3), dtype=np.uint8)):
        Image.fromarray(image).save(tmp_path / f"{i}.png")
        paths.append(str(tmp_path / f"{i}.png"))
        with torch.no_grad():
            logits = hf(pixel_values=processor([image], return_tensors="pt")["pixel_values"]).logits
        expected.append(LABELS[int(logits.argmax())])
    assert main(["classify", str(root / "run"), *paths]) == 0
    assert [line.split("\t")[0] for line in capsys.readouterr().out.splitlines()] == expected
    (tmp_path / "list.txt").write_text(f"{paths[0]}\n\n{paths[1]}\n")
    assert main(["classify", str(root / "run"), "--input", str(tmp_path / "list.txt")]) == 2
    assert capsys.readouterr().err.strip() == (f"seqmap: error: line 2 of {tmp_path / 'list.txt'} is empty; an image "
                                               "classifier reads one image path per line")


def test_bad_bert_and_vit_directories_are_one_line(tmp_path):
    tiny_bert(tmp_path / "bert", seed=2)
    config = json.loads((tmp_path / "bert" / "config.json").read_text())
    (tmp_path / "bert" / "config.json").write_text(json.dumps({**config, "position_embedding_type": "relative_key"}))
    with pytest.raises(HubError, match="position_embedding_type 'relative_key' is not supported"):
        import_hf(tmp_path / "bert", tmp_path / "r1")
    (tmp_path / "bert" / "config.json").write_text(json.dumps({**config, "vocab_size": config["vocab_size"] + 3}))
    with pytest.raises(HubError, match="tokenizer.json has .* tokens but config.json's vocab_size"):
        import_hf(tmp_path / "bert", tmp_path / "r2")
    (tmp_path / "bert" / "config.json").write_text(json.dumps({**config, "hidden_size": 48}))
    with pytest.raises(HubError, match="has shape .* but config.json implies"):
        import_hf(tmp_path / "bert", tmp_path / "r3")
    tokens = {**config, "architectures": ["BertForTokenClassification"]}  # no pooler: the weights lack one
    (tmp_path / "bert" / "config.json").write_text(json.dumps(tokens))
    with pytest.raises(HubError, match=r"config.json: architectures BertForTokenClassification is not supported; "
                                       r"seqmap imports text classifiers \(BertForSequenceClassification, or "
                                       r"BertModel / BertForPreTraining with an untrained head\)"):
        import_hf(tmp_path / "bert", tmp_path / "r6")
    tiny_vit(tmp_path / "vit", seed=2)
    vit_config = json.loads((tmp_path / "vit" / "config.json").read_text())
    masked = {**vit_config, "architectures": ["ViTForMaskedImageModeling"]}
    (tmp_path / "vit" / "config.json").write_text(json.dumps(masked))
    with pytest.raises(HubError, match="architectures ViTForMaskedImageModeling is not supported; seqmap imports "
                                       "image"):
        import_hf(tmp_path / "vit", tmp_path / "r7")
    (tmp_path / "vit" / "config.json").write_text(json.dumps(vit_config))
    (tmp_path / "vit" / "preprocessor_config.json").unlink()
    with pytest.raises(HubError, match="preprocessor_config.json is missing"):
        import_hf(tmp_path / "vit", tmp_path / "r4")
    (tmp_path / "vit" / "config.json").write_text(json.dumps({"model_type": "vit", "hidden_size": 32}))
    with pytest.raises(HubError, match="num_hidden_layers must be a positive integer"):
        import_hf(tmp_path / "vit", tmp_path / "r5")


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("encoder_sources")
    tiny_bert(root / "bert", seed=3)
    tiny_vit(root / "vit", seed=3)
    return root


@pytest.mark.parametrize("model, file, changes, message", [
    ("bert", "config.json", {"hidden_act": "gelu_fast"}, "hidden_act 'gelu_fast' has no seqmap equivalent"),
    ("bert", "config.json", {"layer_norm_eps": 0}, r"layer_norm_eps must be a number in \(0, 1\), got 0"),
    ("bert", "config.json", {"layer_norm_eps": "1e-12"}, "layer_norm_eps must be a number in .*, got '1e-12'"),
    ("bert", "config.json", {"hidden_size": 30}, "hidden_size 30 is not divisible by num_attention_heads 4"),
    ("bert", "config.json", {"is_decoder": True}, r"a BERT decoder \(is_decoder / add_cross_attention\) is not"),
    ("bert", "config.json", {"id2label": {"0": "a", "2": "b"}}, "id2label must number its classes 0..N-1"),
    ("bert", "config.json", {"id2label": {"0": "a", "1": "a"}}, "with distinct names"),
    ("bert", "config.json", {"id2label": {"0": "a"}}, r"\(N >= 2\)"),
    ("bert", "config.json", {"id2label": {"x": "a", "y": "b"}}, "id2label must number its classes"),
    ("vit", "config.json", {"patch_size": 5}, "patch_size 5 does not divide image_size 16"),
    ("vit", "config.json", {"qkv_bias": False}, r"qkv_bias false is not supported"),
    ("vit", "preprocessor_config.json", {"image_std": [0.3, 0.0, 0.3]},
     r"image_mean and image_std must hold 3 numbers each \(num_channels\), std > 0"),
    ("vit", "preprocessor_config.json", {"image_mean": [0.5]}, "must hold 3 numbers each"),
])
def test_an_encoder_config_seqmap_cannot_map_is_one_line_naming_the_field(sources, tmp_path, model, file, changes,
                                                                          message):
    import shutil

    source = tmp_path / model
    shutil.copytree(sources / model, source)
    config = json.loads((source / file).read_text()) | changes
    (source / file).write_text(json.dumps(config))
    with pytest.raises(HubError, match=message) as e:
        import_hf(source, tmp_path / "run")
    assert str(e.value).startswith(str(source / file)) and "\n" not in str(e.value)
    assert not (tmp_path / "run").exists()


def test_labels_numbered_out_of_order_keep_their_ids(sources, tmp_path):
    """id2label read by number, not by the order of its keys: {"1": b, "0": a} gives a = 0, b = 1."""
    import shutil

    source = tmp_path / "bert"
    shutil.copytree(sources / "bert", source)
    config = json.loads((source / "config.json").read_text())
    config["id2label"] = {"2": "positive", "10": "other", "0": "negative", "1": "neutral"}
    config["num_labels"] = 4
    (source / "config.json").write_text(json.dumps(config))
    with pytest.raises(HubError, match="id2label must number its classes 0..N-1"):  # 0, 1, 2, 10: a gap
        import_hf(source, tmp_path / "run")
    config["id2label"] = {"2": "positive", "0": "negative", "1": "neutral"}
    config["num_labels"] = 3
    (source / "config.json").write_text(json.dumps(config))
    import_hf(source, tmp_path / "run")
    assert load_run(tmp_path / "run").labels.names == ("negative", "neutral", "positive")
