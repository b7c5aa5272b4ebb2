"""``seqmap train CONFIG`` / ``seqmap train --resume RUN_DIR``: train on your text, then score the test split."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from seqmap.cli.errors import INTERRUPTED_STATUS, UserError
from seqmap.cli.options import threads
from seqmap.config import (
    DATA_PATHS,
    ModelConfig,
    RunConfig,
    differing_fields,
    from_dict,
    load_config,
    load_config_from_init,
)


def add_parser(commands) -> None:
    train = commands.add_parser(
        "train", allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter,
        help="train a model on your own text from one config file",
        description="Train the model described by CONFIG (model:, data:, train:, decode: sections).\n"
                    "The run directory gets the resolved config, tokenizer, log, metrics and checkpoints.\n"
                    "Override any config key with --section.key VALUE.",
        epilog="examples:\n  seqmap train configs/tatoeba_en_zh.yaml --run-dir runs/en-zh --train.max_steps 2000\n"
               "  seqmap train --resume runs/en-zh\n"
               "  seqmap train configs/my_pairs.yaml --init runs/opus-en-zh --run-dir runs/my-en-zh\n"
               "  torchrun --nproc_per_node 2 -m seqmap train CONFIG   (several processes / GPUs)\n"
               "  torchrun --nproc_per_node 2 -m seqmap train --resume RUN_DIR   (resumed by as many processes)")
    train.add_argument("config", nargs="?", help="YAML run config")
    train.add_argument("--run-dir", help="where the run is written (default: runs/CONFIG_NAME)")
    train.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its last checkpoint")
    train.add_argument("--init", metavar="RUN_DIR", help="fine-tune: start from this run's weights and tokenizer "
                                                         "(trained or imported; its best checkpoint, or a checkpoint "
                                                         "directory), with CONFIG's data and schedule")
    train.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's choice)")
    train.set_defaults(handler=cmd_train)


def cmd_train(args: argparse.Namespace) -> int:
    from seqmap.evaluation import evaluate_test_split
    from seqmap.training.run_trainer import train

    threads(args.threads)
    if args.init and args.resume:
        raise UserError("--init starts a new run from another run's weights; --resume continues a run: give one")
    init = None
    if args.resume:
        run_dir = Path(args.resume)
        if args.config is not None:
            raise UserError("give either CONFIG or --resume RUN_DIR (a resumed run reads RUN_DIR/config.yaml)")
        if not run_dir.exists():
            raise UserError(f"--resume {run_dir} does not exist; give the run directory to continue")
        if not (run_dir / "config.yaml").is_file():
            raise UserError(f"--resume {run_dir}: no config.yaml there; is it a run directory?")
        cfg = load_config(run_dir / "config.yaml", args.overrides)
        check_resumable(cfg, run_dir)
    else:
        if args.config is None:
            raise UserError("give a CONFIG file to train, or --resume RUN_DIR to continue a run")
        if args.init:
            from seqmap.checkpoints import read_config
            from seqmap.runs import find_checkpoint

            init = find_checkpoint(args.init, "best")
            init_model = from_dict(ModelConfig, read_config(init).get("model"), "model")
            cfg = load_config_from_init(args.config, args.overrides, init_model)
        else:
            cfg = load_config(args.config, args.overrides)
        run_dir = Path(args.run_dir) if args.run_dir else Path("runs") / Path(args.config).stem
        if run_dir.exists() and not run_dir.is_dir():
            raise UserError(f"the run directory {run_dir} is a file; choose another --run-dir")
    result = train(cfg, run_dir, resume=bool(args.resume), test=evaluate_test_split, init=init)
    if not result["main"]:  # another process of a torchrun: the main one prints the result
        return 0
    if result["interrupted"]:
        print(f"seqmap: interrupted at step {result['step']}; saved {result['checkpoint']}: continue with "
              f"`seqmap train --resume {run_dir}`", file=sys.stderr)
        return INTERRUPTED_STATUS
    test = result.get("test")
    summary = {"run_dir": str(run_dir), "steps": result["step"], "best": result["best"],
               "train_minutes": round(result["train_seconds"] / 60, 2), "stop": result["stop_reason"]}
    if test and "bleu" in test:
        summary.update(test_bleu=round(test["bleu"], 2), test_chrf=round(test["chrf"], 2))
    elif test and "accuracy" in test:
        summary.update(test_accuracy=round(test["accuracy"], 2), test_macro_f1=round(test["macro_f1"], 2))
        if "baseline" in test:  # TF-IDF + logistic regression on the same rows
            b = test["baseline"]
            summary.update(baseline_accuracy=round(b["accuracy"], 2), baseline_macro_f1=round(b["macro_f1"], 2))
    elif test and "wer" in test:
        summary.update(test_wer=round(test["wer"], 2), test_string_accuracy=round(test["string_accuracy"], 2))
    elif test:
        summary.update(test_ppl=round(test["ppl"], 2))
    print("result " + json.dumps(summary, ensure_ascii=False))
    return 0


def check_resumable(cfg: RunConfig, run_dir: Path) -> None:
    """A resumed run keeps its latest checkpoint's model, data options, optimiser and early-stopping metric (data
    files may move; the checkpoint index ranks by that metric).

    Checked before training starts, so a refused change leaves RUN_DIR/config.yaml as it was.
    """
    from seqmap.checkpoints import CheckpointManager, read_config

    latest = CheckpointManager(run_dir).latest()
    if latest is None:
        return  # nothing to resume: the trainer says so
    saved = from_dict(RunConfig, read_config(latest))
    changed = [("model", name) for name in differing_fields(saved.model, cfg.model)]
    changed += [("data", name) for name in differing_fields(saved.data, cfg.data, skip=DATA_PATHS)]
    changed += [("train", name) for name in differing_fields(saved.train, cfg.train)
                if name in ("optimizer", "early_stopping")]
    if changed:
        section, name = changed[0]
        before, now = getattr(getattr(saved, section), name), getattr(getattr(cfg, section), name)
        raise UserError(f"--resume {run_dir}: {section}.{name} is {before!r} in {latest} but {now!r} now; a "
                        f"resumed run keeps its model, data options, optimiser and early-stopping metric: undo "
                        f"the change, or train a new run in another --run-dir")
