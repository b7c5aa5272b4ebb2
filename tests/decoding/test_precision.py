"""``--precision bf16 / fp16``: 16-bit decoding. The searches run on 16-bit models of every family and
position scheme (on the CPU here, where torch has 16-bit kernels too; tests/test_cuda.py runs them on a GPU),
scores stay float32, and a trained model's tokens mostly stay float32's. The option itself is GPU-only."""

import copy

import pytest
import torch

from seqmap.cli import main
from seqmap.config import ModelConfig
from seqmap.decoding.beam import beam_search
from seqmap.decoding.greedy import greedy
from seqmap.decoding.precision import PrecisionError, decode_dtype, half_precision
from seqmap.decoding.sampling import sample
from seqmap.models.builder import build_model
from seqmap.nn.positional import POSITIONAL_KINDS
from seqmap.training.toy import _decode

AGREE = 0.9  # share of held-out sentences whose 16-bit greedy tokens equal float32's
VARIANTS = [("transformer", pos) for pos in POSITIONAL_KINDS] + [("lm", pos) for pos in POSITIONAL_KINDS] + [
    ("rnn", "sinusoidal"), ("rnn_lm", "sinusoidal")]


@pytest.mark.parametrize(("family", "positional"), VARIANTS)
def test_every_search_runs_on_a_16_bit_model_and_scores_in_float32(family, positional):
    cfg = ModelConfig(family=family, src_vocab=20, tgt_vocab=20, d_model=32, n_heads=2, d_ff=64, enc_layers=1,
                      dec_layers=2, dropout=0.0, positional=positional)
    torch.manual_seed(0)
    fp32 = build_model(cfg).eval()
    src = torch.randint(4, 20, (3, 7))
    lm = family in ("lm", "rnn_lm")
    inputs = dict(prompt=src) if lm else {}
    args = (None, None) if lm else (src, torch.ones_like(src, dtype=torch.bool))
    for dtype in (torch.bfloat16, torch.float16):
        model = copy.deepcopy(fp32).to(dtype)
        with torch.no_grad():
            g = greedy(model, *args, bos=1, eos=2, max_len=6, pad=0, **inputs)
            b = beam_search(model, *args, beam_size=3, bos=1, eos=2, max_len=6, pad=0, **inputs)
            s = sample(model, *args, bos=1, eos=2, max_len=6, top_p=0.9, **inputs,
                       generator=torch.Generator().manual_seed(0))
        assert g.tokens.shape[0] == 3 and g.scores.dtype == torch.float32 and s.scores.dtype == torch.float32
        assert b.best().scores.dtype == torch.float32
        assert torch.isfinite(g.scores).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_trained_model_in_16_bits_gives_float32s_tokens_on_most_sentences(trained_reverse_toy, dtype):
    model, task = trained_reverse_toy
    batch = next(iter(task.batches(1, 200, seed=777)))
    fp32 = _decode(model, batch, "transformer", sep=0, max_len=task.max_len + 1)
    half = _decode(copy.deepcopy(model).to(dtype), batch, "transformer", sep=0, max_len=task.max_len + 1)
    agree = sum(a == b for a, b in zip(fp32, half, strict=True)) / len(fp32)
    assert agree >= AGREE, f"{dtype} equals float32 on {agree:.0%} of sentences, expected >= {AGREE:.0%}"


def test_the_precision_is_checked_in_one_line_naming_the_fix():
    assert decode_dtype(None, "cpu") == decode_dtype("fp32", "cpu") == torch.float32
    model = torch.nn.Linear(2, 2)
    assert half_precision(model, "fp32", "cpu") is model
    with pytest.raises(PrecisionError, match=r"^--precision 'fp8' is not supported; use one of fp32, fp16, bf16$"):
        decode_dtype("fp8", "cpu")
    with pytest.raises(PrecisionError, match=r"^--precision bf16 decodes on a CUDA GPU only \(the CPU decodes in "
                       r"fp32; --quantize int8 is its faster path\); add --device cuda or leave out --precision$"):
        decode_dtype("bf16", "cpu")
    with pytest.raises(PrecisionError, match=r"^--precision fp16 is for translation runs and language models; this "
                       r"data.task=speech run decodes in fp32: leave out --precision$"):
        decode_dtype("fp16", "cuda", "speech")  # a device object is enough: nothing is allocated on it


@pytest.fixture(scope="module")
def translation_ckpt(tmp_path_factory):
    from tests.cli.test_text_inputs import _checkpoint

    return _checkpoint(tmp_path_factory.mktemp("precision"), "translation")


@pytest.mark.parametrize(("argv", "message"), [
    (["translate", "{run}", "the cat", "--precision", "bf16"],
     "seqmap: error: --precision bf16 decodes on a CUDA GPU only (the CPU decodes in fp32; --quantize int8 is its "
     "faster path); add --device cuda or leave out --precision\n"),
    (["evaluate", "{run}", "--src", "{run}/x", "--ref", "{run}/y", "--precision", "half"],
     "seqmap: error: --precision 'half' is not supported; use one of fp32, fp16, bf16\n"),
])
def test_the_cli_refuses_16_bits_on_the_cpu(translation_ckpt, capsys, argv, message):
    assert main([a.format(run=translation_ckpt) for a in argv]) == 2
    assert capsys.readouterr().err == message


def test_ct2_refuses_a_gpu_and_16_bits_rather_than_ignoring_them():
    from seqmap.hub import HubError
    from seqmap.hub.ct2 import refuse_gpu_options

    with pytest.raises(HubError, match=r"^--ct2 runs CTranslate2 on the CPU; leave out --device cuda or --ct2$"):
        refuse_gpu_options("cuda", "fp32")
    with pytest.raises(HubError, match=r"^--precision bf16 is not available with --ct2 \(it decodes in the "
                       r"export's compute type, or int8 with --quantize int8\); leave out --precision or --ct2$"):
        refuse_gpu_options("cpu", "bf16")
    refuse_gpu_options("cpu", "fp32")
    refuse_gpu_options("cpu")



@pytest.mark.parametrize("task", ["classification", "image", "graph", "speech"])
def test_a_run_that_decodes_in_fp32_only_is_told_to_leave_out_precision_not_to_add_a_gpu(task):
    """On the CPU these runs were told "add --device cuda", which then refused them for their task."""
    for device in ("cpu", "cuda"):
        with pytest.raises(PrecisionError, match=rf"^--precision bf16 is for translation runs and language models; "
                           rf"this data.task={task} run decodes in fp32: leave out --precision$"):
            decode_dtype("bf16", device, task)


@pytest.fixture(scope="module")
def lm_ckpt(tmp_path_factory):
    from tests.cli.test_text_inputs import _checkpoint

    return _checkpoint(tmp_path_factory.mktemp("precision_lm"), "lm")


@pytest.mark.parametrize(("argv", "message"), [
    (["translate", "{run}", "the cat", "--ct2", "{run}/ct2", "--precision", "bf16"],
     "--precision bf16 is not available with --ct2 (it decodes in the export's compute type, or int8 with "
     "--quantize int8); leave out --precision or --ct2"),
    (["evaluate", "{run}", "--src", "{run}/x", "--ref", "{run}/y", "--ct2", "{run}/ct2", "--precision", "fp16"],
     "--precision fp16 is not available with --ct2 (it decodes in the export's compute type, or int8 with "
     "--quantize int8); leave out --precision or --ct2"),
    (["evaluate", "{run}", "--ct2", "{run}/ct2", "--device", "cuda"],
     "--ct2 runs CTranslate2 on the CPU; leave out --device cuda or --ct2"),
    (["generate", "{lm}", "--prompt", "the", "--ct2", "{lm}/ct2", "--precision", "bf16"],
     "--precision bf16 is not available with --ct2 (it decodes in the export's compute type, or int8 with "
     "--quantize int8); leave out --precision or --ct2"),
])
def test_ct2_beside_a_gpu_or_16_bits_is_refused_before_the_run_is_loaded(translation_ckpt, lm_ckpt, capsys, argv,
                                                                         message):
    """The run was loaded first, so on the CPU 16 bits were refused with "add --device cuda" (which --ct2 then
    refused too) and --device cuda with "cannot be used here": the --ct2 line was never reached."""
    assert main([a.format(run=translation_ckpt, lm=lm_ckpt) for a in argv]) == 2
    assert capsys.readouterr().err == f"seqmap: error: {message}\n"
