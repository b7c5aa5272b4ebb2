"""Every registered task has its module, which implements the protocol of ``seqmap.tasks.base.Task``."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from seqmap import tasks
from seqmap.config import DataConfig
from seqmap.data.corpus import DataError
from seqmap.evaluation import evaluate_test_split
from seqmap.tasks.base import Task, own_split
from seqmap.tasks.registry import TASKS
from seqmap.training.trainer import TrainingError
from seqmap.training.validate import greedy_note, log_label_scores, log_token_scores


@pytest.mark.parametrize("name", list(TASKS))
def test_every_registered_task_has_its_module(name):
    task = tasks.get(name)
    assert isinstance(task, Task) and task.name == name and task.info is TASKS[name]
    # each task overrides the protocol, none inherits a stub
    for method in ("load", "model_fields", "batches", "validate", "test"):
        assert getattr(type(task), method) is not getattr(Task, method), method


def test_an_unknown_task_is_a_key_error():
    with pytest.raises(KeyError):
        tasks.get("summary")


def test_own_split_names_the_missing_split_and_the_fix():
    with pytest.raises(DataError, match=r"names no test text \(data.test\); give --data FILE"):
        own_split(lambda cfg, name: "", DataConfig(), "test", "text", "data.{}", "give --data FILE")
    assert own_split(lambda cfg, name: name, DataConfig(), "val", "text", "data.{}", "fix") == ("valid", "valid")


def test_a_read_error_keeps_its_message_and_adds_the_fix():
    def gone(cfg, name):
        raise DataError("data.test: no such file")

    with pytest.raises(DataError, match="^data.test: no such file; or give --data FILE$"):
        own_split(gone, DataConfig(), "test", "text", "data.{}", "give --data FILE")


def _cfg(task="translation", family="transformer", stateful=False, early_stopping="loss", valid_bleu=True,
         tgt_lang="en", beam_size=1):
    """The options ``check_trainable`` and the validation log read, without the config's own checks."""
    return SimpleNamespace(
        model=SimpleNamespace(family=family), data=SimpleNamespace(task=task, tgt_lang=tgt_lang),
        train=SimpleNamespace(stateful=stateful, early_stopping=early_stopping, patience_metrics=[],
                              valid_bleu=valid_bleu),
        decode=SimpleNamespace(beam_size=beam_size))


@pytest.mark.parametrize("name, family, refused", [(name, family, (name, family) != ("lm", "rnn_lm"))
                                                   for name in TASKS for family in ("rnn_lm", "lm")])
def test_only_a_recurrent_language_model_trains_stateful(name, family, refused):
    check = tasks.get(name).check_trainable
    check(_cfg(name, family))  # not stateful: nothing to refuse
    if not refused:
        check(_cfg(name, family, stateful=True))
        return
    with pytest.raises(TrainingError, match="^train.stateful=true carries a recurrent state across batches: it "
                                            "needs data.task=lm and model.family=rnn_lm$"):
        check(_cfg(name, family, stateful=True))


@pytest.mark.parametrize("name, family, options, refused", [
    ("translation", "transformer", {"early_stopping": "chrf"}, None),
    ("translation", "transformer", {"early_stopping": "bleu", "tgt_lang": "zh"}, None),
    ("translation", "transformer", {"early_stopping": "chrf", "valid_bleu": False},
     "chrf is measured on the decoded validation set, which train.valid_bleu=false turns off"),
    ("translation", "transformer", {"early_stopping": "rougeL", "tgt_lang": "zh"},
     "rougeL is not measured for a Chinese target"),
    ("lm", "lm", {"early_stopping": "ppl"}, None),
    ("lm", "lm", {"early_stopping": "chrf"}, "chrf is not measured for a language model"),
])
def test_a_metric_validation_never_measures_is_refused(name, family, options, refused):
    check = tasks.get(name).check_trainable
    if refused is None:
        check(_cfg(name, family, **options))
        return
    with pytest.raises(TrainingError, match=refused):
        check(_cfg(name, family, **options))


def test_the_validation_line_hides_signatures_and_says_when_decoding_was_greedy():
    lines = []
    out = {"loss": 1.234567, "ppl": 3.4, "tokens": 12345, "bleu": 20.0, "bleu_signature": "nrefs:1"}
    log_token_scores(out, lines.append, greedy_note(_cfg(beam_size=5), "BLEU", "translate"))
    log_token_scores(out, lines.append, greedy_note(_cfg(beam_size=1), "BLEU", "translate"))
    log_label_scores({"loss": 0.5, "accuracy": 91.25, "examples": 12345}, lines.append)
    assert lines == [
        "validation (BLEU by greedy decoding; test and translate use decode.beam_size=5): loss 1.235, ppl 3.4, "
        "tokens 12345, bleu 20",
        "validation: loss 1.235, ppl 3.4, tokens 12345, bleu 20",
        "validation: loss 0.5, accuracy 91.25, examples 1.234e+04"]


def test_the_test_split_is_scored_by_the_run_s_task():
    trainer = SimpleNamespace(task=SimpleNamespace(test=lambda trainer: {"scored by the task": trainer}))
    assert evaluate_test_split(trainer) == {"scored by the task": trainer}
