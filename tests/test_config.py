"""Typed configs: defaults, type checks, unknown keys with the nearest name, overrides, YAML round trip."""

from pathlib import Path

import pytest

from seqmap.config import (
    ConfigError,
    DataConfig,
    DecodeConfig,
    ModelConfig,
    RunConfig,
    TrainConfig,
    apply_overrides,
    from_dict,
    load_config,
    save_config,
    to_dict,
)


def test_unknown_key_names_the_nearest_valid_one():
    with pytest.raises(ConfigError, match=r"unknown option 'model.d_modle'; did you mean model.d_model\?"):
        from_dict(RunConfig, {"model": {"d_modle": 64}})
    with pytest.raises(ConfigError, match="did you mean train"):
        from_dict(RunConfig, {"trian": {}})


@pytest.mark.parametrize("data, message", [
    ({"train": {"lr": "fast"}}, "train.lr must be a number"),
    ({"model": {"d_model": 6.5}}, "model.d_model must be an integer"),
    ({"model": {"bidirectional": "maybe"}}, "model.bidirectional must be true or false"),
    ({"model": "big"}, "model must be a mapping"),
    ({"train": {"betas": [0.9]}}, "train.betas must be two numbers"),
    ({"train": {"max_steps": 0}}, "training never ends"),
    ({"data": {"train": "a.tsv", "train_src": "a.de", "train_tgt": "a.en"}}, "either data.train or"),
    ({"data": {"valid_src": "a.de"}}, "must be given together"),
    ({"data": {"tokenizer": "bytes"}}, "data.tokenizer"),
    ({"train": {"optimizer": "adagrad"}}, "train.optimizer"),
    ({"train": {"schedule": "step"}}, "train.schedule=step needs train.decay_every"),
    ({"train": {"decay_factor": 2}}, r"train.decay_factor must be in \(0, 1\]"),
    ({"train": {"momentum": 1.0}}, r"train.momentum must be in \[0, 1\)"),
])
def test_bad_values_are_rejected_with_the_option_named(data, message):
    with pytest.raises(ConfigError, match=message):
        from_dict(RunConfig, data)


def test_values_are_coerced_from_strings_and_yaml_scalars():
    cfg = from_dict(RunConfig, {"train": {"lr": "3e-4", "max_steps": "10"}, "model": {"n_kv_heads": None}})
    assert cfg.train.lr == 3e-4 and cfg.train.max_steps == 10 and cfg.model.n_kv_heads is None


def test_dotted_overrides_both_spellings():
    data = apply_overrides({"model": {"d_model": 32}}, ["--train.lr", "3e-4", "model.dropout=0.3",
                                                         "--train.betas", "[0.9, 0.99]"])
    cfg = from_dict(RunConfig, data)
    assert (cfg.train.lr, cfg.model.dropout, cfg.model.d_model, cfg.train.betas) == (3e-4, 0.3, 32, [0.9, 0.99])
    with pytest.raises(ConfigError, match="has no value"):
        apply_overrides({}, ["--train.lr"])


def test_yaml_round_trip(tmp_path):
    cfg = RunConfig(model=ModelConfig(d_model=64, positional="rope"), data=DataConfig(tokenizer="char"),
                    train=TrainConfig(lr=1e-3))
    path = tmp_path / "run.yaml"
    save_config(cfg, path)
    assert load_config(path) == cfg
    assert to_dict(load_config(path, ["--model.d_model", "128"]))["model"]["d_model"] == 128


def test_missing_and_broken_config_files(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n")
    with pytest.raises(ConfigError, match=r"cannot parse .*bad.yaml as YAML: .*\(line \d+, column \d+\)"):
        load_config(bad)
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="must hold a mapping of sections"):
        load_config(tmp_path / "list.yaml")


def test_every_shipped_config_loads():
    from pathlib import Path

    configs = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))
    assert len(configs) >= 5
    for path in configs:
        cfg = load_config(path)
        assert isinstance(cfg, RunConfig), path


def test_cross_section_checks_name_both_options():
    with pytest.raises(ConfigError, match="model.family=lm is a language model but data.task=translation"):
        from_dict(RunConfig, {"model": {"family": "lm"}})
    with pytest.raises(ConfigError, match="data.task=lm needs a language model, but model.family=transformer"):
        from_dict(RunConfig, {"data": {"task": "lm"}})
    with pytest.raises(ConfigError, match=r"model.max_len=64 learned positions cannot cover data.max_len \+ 1"):
        from_dict(RunConfig, {"model": {"positional": "learned", "max_len": 64}, "data": {"max_len": 64}})
    with pytest.raises(ConfigError, match=r"model.max_len=64 learned positions cannot cover data.max_len \+ 1"):
        from_dict(RunConfig, {"model": {"family": "convs2s", "positional": "learned", "max_len": 64},
                              "data": {"max_len": 64}})
    with pytest.raises(ConfigError, match="cannot cover data.context / data.eval_context = 512"):
        from_dict(RunConfig, {"model": {"family": "lm", "positional": "learned", "max_len": 256},
                              "data": {"task": "lm", "context": 256, "eval_context": 512}})
    from_dict(RunConfig, {"model": {"positional": "learned", "max_len": 65}, "data": {"max_len": 64}})
    from_dict(RunConfig, {"model": {"family": "rnn_lm"}, "data": {"task": "lm"}})


@pytest.mark.parametrize("override, message", [
    ({"temperature": 1e-300}, "decode.temperature must be in"),
    ({"temperature": 1e308}, "decode.temperature must be in"),
    ({"top_p": 5e-324}, "decode.top_p must be in"),
    ({"length_penalty": 1.4e308}, "decode.length_penalty must be in"),
    ({"length_penalty": -1.0}, "decode.length_penalty must be in"),
    ({"top_k": -1}, r"decode.top_k must be >= 0 \(0 = off"),  # ran as if top-k were off
    ({"max_len_a": -1.0}, r"decode.max_len_a and decode.max_len_b must be >= 0"),  # was clamped to 1 token
    ({"max_len_b": -3}, r"got 1.5 and -3"),
])
def test_decode_values_whose_float_arithmetic_breaks_are_rejected(override, message):
    # the same ranges the server's request schema declares (a 1e-300 temperature gave NaN probabilities)
    with pytest.raises(ConfigError, match=message):
        DecodeConfig(**override)


def test_an_override_that_is_not_yaml_is_a_config_error():
    with pytest.raises(ConfigError) as info:
        apply_overrides({}, ["--train.lr", "[1"])
    assert str(info.value) == ("override --train.lr '[1' is not a YAML value: expected ',' or ']', but got "
                               "'<stream end>' (line 1, column 3); quote it, or fix the brackets")


@pytest.mark.parametrize("device", ["banana", "cuda:x", "gpu"])
def test_train_device_must_name_a_device(device):
    with pytest.raises(ConfigError) as info:
        TrainConfig(device=device)
    assert str(info.value) == f"train.device = {device!r} is not a device; use auto, cpu, cuda or cuda:N"
    assert TrainConfig(device="cuda:1").device == "cuda:1"  # whether it exists is the trainer's to say


@pytest.mark.parametrize("key", ["--train.lr.x", "--lr", "--train.", "--.lr"])
def test_an_override_is_a_section_and_a_key(key):
    """--train.lr.x 1 said `train.lr must be a number, got {'x': 1}`."""
    with pytest.raises(ConfigError) as info:
        apply_overrides({}, [key, "1"])
    assert str(info.value) == f"override {key}: options are SECTION.KEY (e.g. --train.lr), two names and one dot"


@pytest.mark.parametrize("data, message", [
    ({"train": {"keep_last": 0}}, "train.keep_last must be >= 1 (the latest checkpoint is needed to resume), got 0"),
    ({"model": {"dropout": 1.5}}, "model.dropout must be in [0, 1), got 1.5"),
    ({"model": {"attention_dropout": -0.1}}, "model.attention_dropout must be in [0, 1), got -0.1"),
    ({"model": {"ff_dropout": 1.0}},
     "model.ff_dropout must be in [0, 1) (or null: the same as model.dropout), got 1.0"),
    ({"model": {"positional": "rope", "d_model": 30, "n_heads": 2}},
     "model.positional=rope needs an even head width d_model / n_heads, got 30 / 2 = 15"),
    ({"model": {"pooler": "tanh"}}, "model.embedding_norm and model.pooler are for model.family classifier or vit, "
                                    "not transformer (got model.embedding_norm=False, model.pooler='tanh'); "
                                    "remove them"),
    ({"data": {"valid_size": -1}}, "data.valid_size must be >= 0 (0: data.valid is needed), got -1"),
    ({"data": {"augment_shift": -2}}, "data.augment_shift must be >= 0 (0: no shift), got -2"),
    ({"data": {"train": "a.tsv", "train_src": "a.de", "train_tgt": "a.en"}},
     "give either data.train or data.train_src/train_tgt, not both (got data.train='a.tsv' and "
     "data.train_src='a.de')"),
    ({"data": {"valid_tgt": "a.en"}},
     "data.valid_src and data.valid_tgt must be given together (got data.valid_tgt='a.en' alone)"),
    ({"train": {"schedule": "step"}}, "train.schedule=step needs train.decay_every >= 1 (steps between decays, e.g. "
                                      "one epoch's steps) and train.decay_start (steps before the first decay), got "
                                      "train.decay_every=0"),
    ({"train": {"max_steps": 0, "max_time": -1}}, "training never ends: set train.max_steps, train.max_epochs or "
                                                  "train.max_time (got 0, 0 and -1.0)"),
    ({"train": {"schedule": "cosine", "max_steps": 0, "max_epochs": 3}},
     "train.schedule=cosine decays from train.warmup to train.max_steps, so it needs train.max_steps > train.warmup "
     "(got 0 and 1000); raise train.max_steps, lower train.warmup, or use train.schedule=constant"),
    ({"train": {"schedule": "cosine", "max_steps": 50, "warmup": 50}},
     "train.schedule=cosine decays from train.warmup to train.max_steps, so it needs train.max_steps > train.warmup "
     "(got 50 and 50); raise train.max_steps, lower train.warmup, or use train.schedule=constant"),
    ({"train": {"warmup": -1}}, "train.warmup must be >= 0 steps, got -1"),
    ({"model": {"copy": True}, "data": {"joint_vocab": False}},
     "model.copy=true copies source token ids into the target, so both sides need one vocabulary; set "
     "data.joint_vocab=true (got false), or model.copy=false"),
    ({"model": {"family": "gat"}, "data": {"task": "graph", "train": "g.npz", "test": "t.npz"}},
     "data.task=graph reads one .npz holding the graph and its train/val/test node ids: set data.train (and not "
     "data.valid / data.test), got data.train='g.npz', data.valid=None, data.test='t.npz'"),
], ids=["keep_last", "dropout", "attention_dropout", "ff_dropout", "rope", "pooler", "valid_size", "augment_shift",
        "train-and-train_src", "valid_tgt-alone", "decay_every", "never-ends", "cosine-without-max_steps",
        "cosine-within-warmup", "warmup", "copy", "graph-splits"])
def test_every_bad_value_is_repeated_in_its_message(data, message):
    """These named the option and what is allowed, but not the value given (train.keep_last: 0 said `must be >= 1`)."""
    with pytest.raises(ConfigError) as info:
        from_dict(RunConfig, data)
    assert str(info.value) == message


@pytest.mark.parametrize("family", ["transformer", "lm", "classifier", "vit", "speech", "rnn", "rnn_lm", "gat",
                                    "convs2s"])
def test_relative_cp_is_refused_in_one_line_where_there_is_no_transformer_self_attention(family):
    if family not in ("rnn", "rnn_lm", "gat", "convs2s"):
        assert ModelConfig(family=family, positional="relative_cp").positional == "relative_cp"
        return
    with pytest.raises(ConfigError) as info:
        ModelConfig(family=family, positional="relative_cp")
    assert str(info.value) == (f"model.positional=relative_cp acts inside Transformer self-attention, which "
                               f"model.family={family} has none of; remove it, or use model.family transformer, "
                               "lm, classifier, vit or speech")


def test_shaws_relative_values_are_refused_beside_relative_cp():
    with pytest.raises(ConfigError) as info:
        ModelConfig(positional="relative_cp", relative_values=True)
    assert str(info.value) == ("model.relative_values=true is for Shaw's model.positional=relative; relative_cp "
                               "always has its value side: remove model.relative_values")


def test_init_names_the_model_option_and_both_values(tmp_path):
    from seqmap.config import load_config_from_init

    path = tmp_path / "fine.yaml"
    path.write_text("model:\n  d_model: 64\n")
    with pytest.raises(ConfigError) as info:
        load_config_from_init(path, [], ModelConfig(d_model=32, n_heads=4))
    assert str(info.value) == ("with --init the model is the initial run's; remove model.d_model from the config "
                               "(it gives 64, the initial model has 32; it may change only model.dropout, "
                               "model.attention_dropout, model.ff_dropout)")


@pytest.mark.parametrize("make, message", [
    (lambda: DecodeConfig(max_new_tokens=10.5), "decode.max_new_tokens must be an integer, got 10.5"),
    (lambda: TrainConfig(lr="fast"), "train.lr must be a number, got 'fast'"),
    (lambda: ModelConfig(bidirectional="maybe"), "model.bidirectional must be true or false, got 'maybe'"),
    (lambda: ModelConfig(d_model=True), "model.d_model must be an integer, got True"),
    (lambda: DataConfig(train=7), "data.train must be a string, got 7"),
    (lambda: DataConfig(image_size=[32, "wide"]), "data.image_size must be an integer, got 'wide'"),
    (lambda: RunConfig(model={"d_model": 64}), "model must be a ModelConfig, got dict"),
], ids=["decode-int", "train-float", "model-bool", "bool-for-int", "data-str", "data-list", "run-section"])
def test_sections_built_in_python_get_the_type_checks_of_yaml(make, message):
    """Only from_dict (YAML, --overrides) checked types: DecodeConfig(max_new_tokens=10.5) passed, TrainConfig(lr=
    "3e-4") failed with a TypeError, ModelConfig(bidirectional="maybe") was a true value."""
    with pytest.raises(ConfigError) as info:
        make()
    assert str(info.value) == message


def test_sections_built_in_python_get_the_conversions_of_yaml():
    """The gentle conversions YAML values get (a number in a string, a whole float for an integer, a bool spelt as
    a string, a comma list) apply alike; values of the right type are kept as they are."""
    assert TrainConfig(lr="3e-4", max_steps=10.0, betas="0.9,0.99") == from_dict(
        TrainConfig, {"lr": "3e-4", "max_steps": 10.0, "betas": "0.9,0.99"})
    train = TrainConfig(lr="3e-4", max_steps=10.0, betas="0.9,0.99")
    assert (train.lr, train.max_steps, train.betas) == (3e-4, 10, [0.9, 0.99])
    assert type(train.max_steps) is int and ModelConfig(bidirectional="false").bidirectional is False
    assert ModelConfig(dropout=0).dropout == 0.0 and type(ModelConfig(dropout=0).dropout) is float
    assert DecodeConfig(hf_early_stopping="never").hf_early_stopping == "never"
    assert ModelConfig(n_kv_heads=None).n_kv_heads is None and DataConfig(opencc=None).opencc is None


def test_sections_built_in_python_take_paths_and_numpy_numbers():
    """A library caller's pathlib.Path and NumPy scalars are what YAML would hold (a str, an int, a float), not
    errors: the type checks of sections built in Python refused them at first."""
    import numpy as np

    data = DataConfig(train=Path("corpus") / "train.tsv", max_len=np.int64(64))
    assert data.train == str(Path("corpus") / "train.tsv") and type(data.train) is str
    assert data.max_len == 64 and type(data.max_len) is int
    lr = TrainConfig(lr=np.float32(0.5)).lr
    assert lr == 0.5 and type(lr) is float
    with pytest.raises(ConfigError, match=r"decode.beam_size must be an integer, got .*2\.5"):
        DecodeConfig(beam_size=np.float64(2.5))


def test_a_key_of_two_kinds_names_both_in_its_error():
    """decode.hf_early_stopping takes true, false or a word (never); 1 was answered "must be true or false"."""
    with pytest.raises(ConfigError, match=r"^decode.hf_early_stopping must be true or false or a string, got 1$"):
        from_dict(DecodeConfig, {"hf_early_stopping": 1}, "decode")
    assert from_dict(DecodeConfig, {"hf_early_stopping": "never"}, "decode").hf_early_stopping == "never"


def test_differing_fields_in_field_order_but_for_skip():
    import dataclasses

    from seqmap.config import DataConfig, differing_fields

    a, b = DataConfig(train="a.txt", vocab_size=100), DataConfig(train="b.txt", vocab_size=200, lowercase=True)
    names = [f.name for f in dataclasses.fields(DataConfig)]
    assert differing_fields(a, b) == sorted(["train", "vocab_size", "lowercase"], key=names.index)
    assert differing_fields(a, b, skip=("train", "lowercase")) == ["vocab_size"]
    assert differing_fields(a, a) == []
