"""What runs only on a CUDA GPU: decoding there (float32 and ``--precision bf16 / fp16``), mixed-precision
training (bf16 autocast; fp16 with a gradient scaler), the loss on GPU logits, a GPU checkpoint read on the CPU.

Skipped where torch sees no GPU (CI has none). Run on a machine with one, e.g. the device tool's
(``bench/cuda_checks.sh`` runs this file there): ``python -m pytest -q tests/test_cuda.py``.
"""

import copy

import pytest
import torch

from seqmap.config import ModelConfig, TrainConfig
from seqmap.data.synthetic import SyntheticTask
from seqmap.decoding.beam import beam_search
from seqmap.training.loss import label_smoothed_nll, output_nll
from seqmap.training.toy import _decode, framed
from seqmap.training.trainer import Trainer

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

AGREE = 0.9  # share of held-out sentences whose 16-bit greedy tokens equal float32's


def _held_out(task, device="cpu"):
    return next(iter(task.batches(1, 200, seed=777))).to(device)


def test_greedy_on_the_gpu_gives_the_cpus_tokens_and_beam_its_scores(trained_reverse_toy):
    model, task = trained_reverse_toy
    batch = _held_out(task)
    gpu = copy.deepcopy(model).cuda()
    cpu_tokens = _decode(model, batch, "transformer", sep=0, max_len=task.max_len + 1)
    gpu_tokens = _decode(gpu, batch.to("cuda"), "transformer", sep=0, max_len=task.max_len + 1)
    assert gpu_tokens == cpu_tokens
    src, mask = batch.src[:32], batch.src_mask[:32]
    on_cpu = beam_search(model, src, mask, beam_size=4, bos=1, eos=2, max_len=task.max_len + 1).best()
    on_gpu = beam_search(gpu, src.cuda(), mask.cuda(), beam_size=4, bos=1, eos=2, max_len=task.max_len + 1).best()
    assert on_gpu.tokens.tolist() == on_cpu.tokens.tolist()
    torch.testing.assert_close(on_gpu.scores.cpu(), on_cpu.scores, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16_bit_decoding_on_the_gpu_gives_float32s_tokens_on_most_sentences(trained_reverse_toy, dtype):
    from seqmap.decoding.precision import half_precision

    model, task = trained_reverse_toy
    batch = _held_out(task, "cuda")
    fp32 = _decode(copy.deepcopy(model).cuda(), batch, "transformer", sep=0, max_len=task.max_len + 1)
    name = {torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]
    half = half_precision(copy.deepcopy(model).cuda(), name, "cuda")
    assert all(p.dtype == dtype for p in half.parameters())
    tokens = _decode(half, batch, "transformer", sep=0, max_len=task.max_len + 1)
    agree = sum(a == b for a, b in zip(fp32, tokens, strict=True)) / len(fp32)
    assert agree >= AGREE, f"{name} equals float32 on {agree:.0%} of sentences, expected >= {AGREE:.0%}"


@pytest.mark.parametrize("family", ["transformer", "rnn", "lm"])
@pytest.mark.parametrize("precision", ["bf16", "fp16", "fp32"])
def test_mixed_precision_training_on_the_gpu_learns_and_its_checkpoint_reads_on_the_cpu(family, precision, tmp_path):
    """bf16 autocast, fp16 autocast with a gradient scaler, and float32 (the fused output loss) each train a
    small model on the reverse task; the weights saved from the GPU load into a CPU model that decodes alike."""
    from seqmap.checkpoints import load_checkpoint, save_checkpoint
    from seqmap.models.builder import build_model

    task = SyntheticTask("reverse", 10, 2, 6)
    sep = task.vocab  # an LM reads <bos> src <sep> tgt <eos> (seqmap.training.toy.framed)
    cfg = ModelConfig(family=family, src_vocab=0 if family == "lm" else task.vocab,
                      tgt_vocab=task.vocab + (family == "lm"), d_model=64, n_heads=2, d_ff=128, enc_layers=1,
                      dec_layers=1, dropout=0.0)
    torch.manual_seed(0)
    model = build_model(cfg).cuda()
    t = TrainConfig(device="cuda", precision=precision, max_steps=150, lr=3e-3, warmup=10, schedule="cosine",
                    min_lr=3e-4, label_smoothing=0.0, clip_norm=1.0, log_every=150, valid_every=150)
    torch.backends.cuda.enable_cudnn_sdp(True)
    trainer = Trainer(model, t, torch.device("cuda"))
    assert not torch.backends.cuda.cudnn_sdp_enabled()  # a plan per new batch shape (seqmap.nn.attention)
    assert (trainer.scaler is not None) == (precision == "fp16")
    assert not (trainer.fused_output and precision != "fp32")  # the chunked output loss is float32's
    generator = torch.Generator().manual_seed(0)

    def batches():
        while True:
            yield framed(task.batch(64, generator), family, sep)

    losses = []
    trainer.run(batches(), on_step=lambda step, loss, lr: losses.append(loss))
    assert len(losses) == 150 and trainer.state["skipped_steps"] == 0
    assert all(torch.isfinite(torch.tensor(losses)))
    assert sum(losses[-10:]) / 10 < 0.5 * sum(losses[:10]) / 10, "the loss did not fall"
    saved = save_checkpoint(tmp_path / "ckpt", model=model, trainer_state={}, config={})
    cpu = build_model(cfg)
    load_checkpoint(saved, model=cpu)
    for name, p in cpu.state_dict().items():
        assert p.device.type == "cpu"
        torch.testing.assert_close(p, model.state_dict()[name].cpu(), rtol=0, atol=0)


def test_the_output_loss_on_gpu_logits_matches_the_reference_in_every_dtype():
    torch.manual_seed(0)
    h = torch.randn(300, 64, device="cuda", requires_grad=True)
    output = torch.nn.Linear(64, 1000).cuda()
    target = torch.randint(1, 1000, (300,), device="cuda")
    target[::7] = 0  # PAD
    logits = output(h)
    reference = torch.nn.functional.cross_entropy(logits.float(), target, ignore_index=0, reduction="sum",
                                                  label_smoothing=0.1)
    loss, nll, n = output_nll(h, output, target, 0, 0.1)
    assert n == int((target != 0).sum())
    torch.testing.assert_close(loss, reference, rtol=1e-5, atol=1e-3)
    (grad_fused,) = torch.autograd.grad(loss, h)
    (grad_reference,) = torch.autograd.grad(reference, h)
    torch.testing.assert_close(grad_fused, grad_reference, rtol=1e-4, atol=1e-5)
    for dtype in (torch.bfloat16, torch.float16):
        with torch.autocast("cuda", dtype=dtype):
            half_logits = output(h)
        assert half_logits.dtype == dtype
        loss, _, _ = label_smoothed_nll(half_logits, target, 0, 0.1)
        assert loss.dtype == torch.float32
        expected = torch.nn.functional.cross_entropy(half_logits.float(), target, ignore_index=0, reduction="sum",
                                                     label_smoothing=0.1)
        torch.testing.assert_close(loss, expected, rtol=1e-4, atol=1e-2)
        (grad,) = torch.autograd.grad(loss, h)
        assert torch.isfinite(grad).all()


def test_load_run_on_the_gpu_in_16_bits_translates(tmp_path, capsys):
    from seqmap.cli import main
    from seqmap.runs import load_run
    from tests.cli.test_text_inputs import _checkpoint

    ckpt = _checkpoint(tmp_path, "translation")
    for precision, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        torch.backends.cuda.enable_cudnn_sdp(True)
        run = load_run(ckpt, device="cuda", precision=precision)
        assert not torch.backends.cuda.cudnn_sdp_enabled()  # decoding's key length grows every step
        assert {p.dtype for p in run.model.parameters()} == {dtype}
        assert {p.device.type for p in run.model.parameters()} == {"cuda"}
        assert main(["translate", str(ckpt), "the cat", "a dog", "--device", "cuda", "--precision", precision]) == 0
        assert len(capsys.readouterr().out.splitlines()) == 2
    assert main(["translate", str(ckpt), "the cat", "--device", "cuda", "--quantize", "int8"]) == 2
    assert "CPU only" in capsys.readouterr().err


def test_provenance_names_the_gpu_and_a_cpu_run_differs_from_it():
    from seqmap import provenance

    gpu, cpu = provenance.collect(torch.device("cuda")), provenance.collect(torch.device("cpu"))
    assert (gpu.device_type, gpu.gpu) == ("cuda", torch.cuda.get_device_name())
    assert gpu.gpu in gpu.machine() and provenance.differs(gpu, cpu) == ["device_type", "gpu"]
