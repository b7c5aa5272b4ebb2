"""Serve a trained run over HTTP, with a page to translate and explore attention.

    seqmap serve RUN_DIR [--host 127.0.0.1] [--port 8000] [--checkpoint best|last|DIR]
                         [--max-batch 32] [--wait-ms 5] [--threads N] [--ct2 DIR]

``app.py`` is the FastAPI app (``create_app``), ``engine.py`` the decode work,
``classify.py`` and ``transcribe.py`` the work of classifiers and speech models,
``batcher.py`` the dynamic batching, ``schemas.py`` the request and response
bodies with their limits, ``static/`` the page. FastAPI and uvicorn are an
optional extra (``pip install -e ".[serve]"``), so this module imports them only
when the command runs: ``seqmap.cli`` can add the subcommand without them.
"""

from __future__ import annotations

import argparse
import sys

USAGE_ERROR = 2  # as seqmap.cli: a user error prints one line and exits 2
LOOPBACK = "127.0.0.1"


class ServeError(ValueError):
    """A mistake in the serve command's options or environment; printed as one line, exit status 2."""


def add_parser(commands) -> argparse.ArgumentParser:
    """Add the ``serve`` subcommand to ``commands`` (the object ``add_subparsers`` returned)."""
    p = commands.add_parser(
        "serve", allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter,
        help="serve a trained run over HTTP, with a page to translate and explore attention",
        description="Serve RUN_DIR over HTTP: POST /translate (/generate for a language model, /classify\n"
                    "for a classifier, /transcribe for a speech model),\n"
                    "GET /health, GET /info, the API docs at /docs, and a page at / to translate and\n"
                    "explore attention. Concurrent requests are decoded together (dynamic batching).\n"
                    "Binds to 127.0.0.1 unless --host says otherwise. Needs the serve extra:\n"
                    "pip install -e \".[serve]\".",
        epilog="examples:\n  seqmap serve runs/en-zh   (then open http://127.0.0.1:8000/)\n"
               "  seqmap serve runs/en-zh --port 8080 --max-batch 64 --wait-ms 10 --threads 2\n"
               "  seqmap serve runs/de-en --ct2 runs/de-en/ct2 --threads 1   (search with the CTranslate2 export)\n"
               "  curl -s localhost:8000/translate -H 'content-type: application/json' "
               "-d '{\"text\": \"I love you.\"}'")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (or one checkpoint directory)")
    p.add_argument("--host", default=LOOPBACK, help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--checkpoint", "--which", dest="checkpoint", default="best",
                   help="best (default), last, or a checkpoint directory")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's choice)")
    p.add_argument("--quantize", default="none", help="none (default) or int8: Linear layers in int8 (CPU only)")
    p.add_argument("--precision", default="fp32", help="fp32 (default), bf16 or fp16: decode with 16-bit weights "
                   "(with --device cuda; translation and language-model runs)")
    p.add_argument("--ct2", metavar="DIR",
                   help="a Transformer translation run or LM: search with this CTranslate2 export of it (seqmap "
                        "export ct2 RUN_DIR --out DIR); greedy outputs and scores as seqmap's, attention from the "
                        "run; an LM's sampled requests stay seqmap's")
    p.add_argument("--max-batch", type=int, default=32,
                   help="most sentences decoded together (default 32; 1 = one request at a time)")
    p.add_argument("--max-waiting", type=int, default=256,
                   help="most requests waiting for the model; beyond it, 503 with Retry-After (default 256)")
    p.add_argument("--wait-ms", type=float, default=5.0,
                   help="how long a batch waits for more requests after its first (default 5 ms)")
    p.add_argument("--max-chars", type=int, default=1000, help="characters per text (default 1000)")
    p.add_argument("--max-texts", type=int, default=32, help="texts per /translate request (default 32)")
    p.add_argument("--max-beam", type=int, default=8, help="largest beam size a request may ask for (default 8)")
    p.add_argument("--max-new-tokens", type=int, default=256, help="most tokens per /generate request (default 256)")
    p.add_argument("--max-body-bytes", type=int, default=1_000_000,
                   help="largest request body (default 1,000,000; beyond it 413): base64 makes a file a third "
                        "larger, so a 60 s WAV of 16-bit 16 kHz audio needs about 2,600,000")
    p.add_argument("--max-audio-seconds", type=float, default=60.0,
                   help="longest recording one /transcribe file may hold, read from its header (default 60)")
    p.add_argument("--max-attention", type=int, default=2_000_000,
                   help="most attention weights one answer may carry, by an upper bound checked before decoding "
                        "(default 2,000,000; beyond it 422 naming the field attention)")
    p.set_defaults(handler=main)
    return p


def main(args: argparse.Namespace) -> int:
    """Run ``seqmap serve`` with parsed ``args``; user errors print one line to stderr and return 2."""
    from seqmap.checkpoints import CheckpointError
    from seqmap.config import ConfigError
    from seqmap.data.tokenizers import TokenizerError
    from seqmap.runs import RunError

    try:
        app, settings = _build(args)
    except (ServeError, RunError, CheckpointError, TokenizerError, ConfigError) as e:
        print(f"seqmap: error: {e}", file=sys.stderr)
        return USAGE_ERROR
    import uvicorn

    where = f"http://{args.host}:{args.port}/"
    print(f"serving {args.run_dir} ({settings}) on {where}  (API docs: {where}docs; Ctrl-C stops)", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")
    return 0


def _build(args: argparse.Namespace):
    """Check the options, load the run and make the app; ServeError says which option is wrong."""
    overrides = getattr(args, "overrides", None)
    if overrides:
        raise ServeError(f"seqmap serve takes no config overrides (got {overrides[0]}); decode options "
                         "(beam_size, n_best, ...) are per request")
    for name in ("max_batch", "max_waiting", "max_chars", "max_texts", "max_beam", "max_new_tokens", "max_attention",
                 "max_body_bytes"):
        if getattr(args, name) < 1:
            raise ServeError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if not args.max_audio_seconds > 0:
        raise ServeError(f"--max-audio-seconds must be > 0, got {args.max_audio_seconds}")
    if args.wait_ms < 0:
        raise ServeError(f"--wait-ms must be >= 0, got {args.wait_ms}")
    if not 0 < args.port < 65536:
        raise ServeError(f"--port must be in 1..65535, got {args.port}")
    if args.threads is not None and args.threads <= 0:
        raise ServeError(f"--threads must be > 0, got {args.threads}")
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as e:
        raise ServeError(f"seqmap serve needs FastAPI and uvicorn ({e.name} is not installed): "
                         "pip install -e \".[serve]\"") from None
    import torch

    from seqmap.runs import load_run
    from seqmap.serve.app import create_app
    from seqmap.serve.schemas import Limits
    from seqmap.tasks.registry import TASKS

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    try:
        device = torch.device(args.device)
    except RuntimeError:
        raise ServeError(f"--device {args.device!r} is not a device; use cpu, cuda or cuda:N") from None
    if args.quantize != "none" and (args.quantize != "int8" or device.type != "cpu"):
        raise ServeError(f"--quantize {args.quantize!r} with --device {args.device}: "
                         "use --quantize none, or int8 on the CPU")
    if args.ct2 is not None:  # before loading the run, which would refuse 16 bits on the CPU otherwise
        from seqmap.hub import HubError
        from seqmap.hub.ct2 import refuse_gpu_options

        try:
            refuse_gpu_options(args.device, args.precision)
        except HubError as e:
            raise ServeError(str(e)) from None
    run = load_run(args.run_dir, args.checkpoint, device, quantize=args.quantize, precision=args.precision)
    info = TASKS[run.cfg.data.task]
    if info.endpoint is None:  # refusal: "a graph (GAT) run; use ..."
        raise ServeError(f"{args.run_dir} is {info.one}; the server translates, generates and classifies texts "
                         f"and images, and transcribes audio ({info.refusal.removeprefix(info.one + '; ')})")
    ct2, decoder = _ct2_export(args, run)
    limits = Limits(max_chars=args.max_chars, max_texts=args.max_texts, max_beam=args.max_beam,
                    max_new_tokens=args.max_new_tokens, max_attention_weights=args.max_attention,
                    max_audio_seconds=args.max_audio_seconds, max_body_bytes=args.max_body_bytes)
    app = create_app(run, limits=limits, max_batch=args.max_batch, wait_ms=args.wait_ms, threads=args.threads,
                     max_waiting=args.max_waiting, ct2=ct2, decoder=decoder)
    settings = (f"{run.cfg.model.family}, checkpoint {run.checkpoint.name}, "
                + ("" if args.precision == "fp32" else f"{args.precision} weights, ")
                + f"max batch {args.max_batch}, "
                f"wait {args.wait_ms:g} ms, {torch.get_num_threads()} threads"
                + ("" if ct2 is None else f", searching with {decoder}"))
    return app, settings


def _ct2_export(args: argparse.Namespace, run):
    """``--ct2 DIR``: (the export's ``ctranslate2.Translator`` or, for an LM, ``Generator``, what /info calls it),
    or (None, "seqmap")."""
    if args.ct2 is None:
        return None, "seqmap"
    import torch

    from seqmap.hub import HubError
    from seqmap.hub.ct2 import open_export
    from seqmap.hub.ct2.spec import KINDS

    family, task = run.cfg.model.family, run.cfg.data.task
    if family not in KINDS:  # the config check keeps model.family=transformer to translation
        raise ServeError(f"--ct2 searches for Transformer translation runs and decoder-only LMs; {args.run_dir} is "
                         f"model.family={family}, data.task={task}: leave out --ct2")
    if run.cfg.decode.no_repeat_ngram:  # every search would fail in the worker: refuse before serving
        raise ServeError(f"{args.run_dir} decodes with decode.no_repeat_ngram={run.cfg.decode.no_repeat_ngram}, "
                         "which CTranslate2 is not given: leave out --ct2")
    try:
        export = open_export(args.ct2, run, threads=torch.get_num_threads(), int8=args.quantize == "int8")
    except HubError as e:
        raise ServeError(str(e)) from None
    return export, f"CTranslate2 ({args.ct2}, {export.compute_type})"
