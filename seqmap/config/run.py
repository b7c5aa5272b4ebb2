"""A whole experiment (``RunConfig``: the four sections and the checks across them) and reading one from YAML."""

from __future__ import annotations

from dataclasses import dataclass, field

from seqmap.config.data import DataConfig
from seqmap.config.decode import DecodeConfig
from seqmap.config.model import ModelConfig
from seqmap.config.train import TrainConfig
from seqmap.config_io import ConfigError, check_types, from_dict, read_yaml, to_dict
from seqmap.tasks.registry import TASKS, task_of_family


@dataclass
class RunConfig:
    """A whole experiment: the one config file `seqmap train` reads."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def __post_init__(self) -> None:
        """Checks across sections: each one-line error names both options."""
        check_types(self, "")
        m, d = self.model, self.data
        task, lm = TASKS[d.task], TASKS["lm"]
        if m.family in lm.families and d.task != lm.name:
            raise ConfigError(f"model.family={m.family} is a language model but data.task={d.task}; set "
                              "data.task=lm, or use model.family=transformer or rnn for translation")
        if m.family not in lm.families and d.task == lm.name:
            raise ConfigError(f"data.task=lm needs a language model, but model.family={m.family}; set "
                              "model.family=lm or rnn_lm")
        needs = ((task.families[0], d.task) if task.families and m.family not in task.families
                 else (m.family, task_of_family(m.family)))
        if needs[1] is not None and (m.family, d.task) != needs:
            raise ConfigError(f"model.family={needs[0]} and data.task={needs[1]} go together (got model.family="
                              f"{m.family}, data.task={d.task}); set both, or neither")
        transcribes = "wer" in task.metrics
        for metric in (self.train.early_stopping, *self.train.patience_metrics):
            if metric in ("accuracy", "macro_f1") and not task.labelled:
                raise ConfigError(f"train.early_stopping / patience_metrics {metric} is a classification metric; "
                                  f"data.task={d.task} validates loss, ppl (and bleu, chrf, rougeL for translation)")
            if metric in ("bleu", "chrf", "rougeL", "ppl") and task.labelled:
                raise ConfigError(f"train.early_stopping / patience_metrics {metric} is not measured for "
                                  f"classification (data.task={d.task}); use loss, accuracy or macro_f1")
            if (metric in ("wer", "string_accuracy")) != transcribes and metric in (
                    "wer", "string_accuracy", "bleu", "chrf", "rougeL"):
                raise ConfigError(f"train.early_stopping / patience_metrics {metric} is not measured for "
                                  f"data.task={d.task}; speech validates loss, ppl, wer and string_accuracy")
        if m.copy and not d.joint_vocab:
            raise ConfigError("model.copy=true copies source token ids into the target, so both sides need one "
                              "vocabulary; set data.joint_vocab=true (got false), or model.copy=false")
        if task.check is not None:
            task.check(self)
        if m.positional == "learned" and m.family in ("transformer", "lm", "classifier", "convs2s"):
            longest = max(d.context, d.eval_context) if task.windows else max(d.max_len, d.max_src_len) + 1
            what = ("data.context / data.eval_context" if task.windows
                    else "data.max_len + 1 (CLS)" if task.labelled
                    else "data.max_len + 1 (BOS)" if d.max_src_len == 0
                    else "max(data.max_len, data.max_src_len) + 1 (BOS)")
            if m.max_len < longest:
                raise ConfigError(f"model.max_len={m.max_len} learned positions cannot cover {what} = {longest} "
                                  f"tokens; raise model.max_len to at least {longest}")


def load_config(path, overrides: list[str] | None = None) -> RunConfig:
    """Read a YAML run config, apply dotted overrides, and type-check everything."""
    return from_dict(RunConfig, read_yaml(path, overrides))


INIT_MODEL_OPTIONS = ("dropout", "attention_dropout", "ff_dropout")  # what a config may change of an --init model


def load_config_from_init(path, overrides: list[str] | None, init_model: ModelConfig) -> RunConfig:
    """CONFIG's data, train and decode sections with the model of the run it starts from (``seqmap train --init``).

    The architecture is the initial run's; the config may set only its dropout options (``INIT_MODEL_OPTIONS``).
    """
    raw = read_yaml(path, overrides)
    model = raw.get("model") or {}
    if not isinstance(model, dict):
        raise ConfigError(f"model must be a mapping of options, got {type(model).__name__}")
    base = to_dict(init_model)
    for key in sorted(set(model) - set(INIT_MODEL_OPTIONS)):
        if key in base and getattr(from_dict(ModelConfig, {**base, key: model[key]}, "model"), key) == base[key]:
            continue  # the same value as the initial model (e.g. the config it was trained with)
        values = f"it gives {model[key]!r}, the initial model has {base[key]!r}; " if key in base else ""
        raise ConfigError(f"with --init the model is the initial run's; remove model.{key} from the config "
                          f"({values}it may change only {', '.join(f'model.{k}' for k in INIT_MODEL_OPTIONS)})")
    raw["model"] = {**base, **model}
    return from_dict(RunConfig, raw)
