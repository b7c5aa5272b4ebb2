"""Learning-rate schedules: warmup peaks, decay shapes, golden values, the factory and set_lr."""

import math

import pytest
import torch

from seqmap.training.schedule import SCHEDULES, constant, cosine, inverse_sqrt, make_schedule, noam, set_lr, step_decay

LR, WARMUP, TOTAL, MIN_LR = 5e-4, 100, 1000, 1e-5


def curve(fn, last: int = TOTAL + 50) -> list[float]:
    return [fn(step) for step in range(1, last + 1)]


@pytest.mark.parametrize(
    "fn",
    [
        lambda s: constant(s, WARMUP, LR),
        lambda s: inverse_sqrt(s, WARMUP, LR),
        lambda s: cosine(s, WARMUP, TOTAL, LR, MIN_LR),
    ],
    ids=["constant", "inverse_sqrt", "cosine"],
)
def test_linear_warmup_peaks_at_warmup(fn):
    assert fn(WARMUP) == pytest.approx(LR, rel=1e-12)
    assert fn(1) == pytest.approx(LR / WARMUP)
    assert fn(WARMUP // 2) == pytest.approx(LR / 2)
    values = curve(fn)
    assert max(values) == pytest.approx(LR, rel=1e-12)
    warm = values[:WARMUP]
    assert all(a < b for a, b in zip(warm, warm[1:], strict=False))  # strictly increasing during warmup
    after = values[WARMUP - 1 :]
    assert all(a >= b for a, b in zip(after, after[1:], strict=False))  # never increasing after the peak


def test_inverse_sqrt():
    assert inverse_sqrt(4 * WARMUP, WARMUP, LR) == pytest.approx(LR / 2)
    assert inverse_sqrt(100 * WARMUP, WARMUP, LR) == pytest.approx(LR / 10)
    with pytest.raises(ValueError, match="warmup >= 1"):
        inverse_sqrt(5, 0, LR)


def test_noam_golden_and_same_curve_as_inverse_sqrt():
    # by hand: 512**-0.5 * 4000**-0.5 = 1 / sqrt(2_048_000) = 1 / 1431.0835... = 6.98771e-4
    assert noam(4000, d_model=512, warmup=4000) == pytest.approx(6.98771e-4, rel=1e-5)
    assert noam(16000, d_model=512, warmup=4000, factor=2.0) == pytest.approx(6.98771e-4, rel=1e-5)  # 2 * peak / 2
    assert noam(1, d_model=512, warmup=4000) == pytest.approx(512**-0.5 * 4000**-1.5)
    peak = noam(4000, 512, 4000)
    for step in (1, 7, 3999, 4000, 4001, 10_000, 123_456):
        assert noam(step, 512, 4000) == pytest.approx(inverse_sqrt(step, 4000, peak), rel=1e-12)


def test_cosine_reaches_min_lr_and_stays():
    assert cosine(TOTAL, WARMUP, TOTAL, LR, MIN_LR) == pytest.approx(MIN_LR)
    assert cosine(TOTAL + 500, WARMUP, TOTAL, LR, MIN_LR) == pytest.approx(MIN_LR)
    middle = (WARMUP + TOTAL) // 2
    assert cosine(middle, WARMUP, TOTAL, LR, MIN_LR) == pytest.approx((LR + MIN_LR) / 2)
    with pytest.raises(ValueError, match="total > warmup"):
        cosine(1, 10, 10, LR)


def test_step_decay_is_zarembas_epoch_schedule():
    # 10 steps per epoch: lr 1 for four epochs (steps 1-40), then halved at the first step of every later epoch
    lrs = [step_decay(s, warmup=0, lr=1.0, decay_start=40, decay_every=10) for s in range(1, 71)]
    assert lrs[:40] == [1.0] * 40
    assert lrs[40:50] == [0.5] * 10 and lrs[50:60] == [0.25] * 10 and lrs[60:70] == [0.125] * 10
    assert step_decay(45, warmup=0, lr=2.0, decay_start=40, decay_every=10, decay_factor=0.1) == pytest.approx(0.2)
    assert step_decay(5, warmup=10, lr=1.0, decay_start=40, decay_every=10) == pytest.approx(0.5)  # warming up
    assert step_decay(7, warmup=0, lr=1.0, decay_start=0, decay_every=3) == 0.125  # ceil(7 / 3) = 3 decays
    for bad in (dict(decay_every=0), dict(decay_start=-1), dict(decay_factor=0.0), dict(decay_factor=1.5)):
        with pytest.raises(ValueError, match="step_decay needs"):
            step_decay(1, **{"warmup": 0, "lr": 1.0, "decay_start": 4, "decay_every": 2, **bad})


def test_constant_and_no_warmup():
    assert constant(1, 0, LR) == LR and constant(10**6, WARMUP, LR) == LR
    assert cosine(1, 0, TOTAL, LR) < LR and cosine(1, 0, TOTAL, LR) == pytest.approx(LR, rel=1e-5)


def test_step_counts_from_one():
    for fn in (lambda s: constant(s, 10, LR), lambda s: noam(s, 512, 10)):
        with pytest.raises(ValueError, match="from 1"):
            fn(0)


def test_make_schedule_binds_parameters():
    schedule = make_schedule("cosine", warmup=WARMUP, total=TOTAL, lr=LR, min_lr=MIN_LR)
    assert [schedule(s) for s in (1, 50, 100, 700, 1000)] == [cosine(s, WARMUP, TOTAL, LR, MIN_LR) for s in
                                                              (1, 50, 100, 700, 1000)]
    assert make_schedule("noam", d_model=512, warmup=4000)(4000) == noam(4000, 512, 4000)
    assert set(SCHEDULES) == {"constant", "inverse_sqrt", "noam", "cosine", "step"}


def test_make_schedule_errors_name_the_options():
    options = r"\['constant', 'cosine', 'inverse_sqrt', 'noam', 'step'\]"
    with pytest.raises(ValueError, match=r"did you mean 'cosine'.*" + options):
        make_schedule("cosin", warmup=1, total=10, lr=1.0)
    with pytest.raises(ValueError, match="no parameter 'warmpu'.*did you mean 'warmup'"):
        make_schedule("constant", warmpu=10, lr=1.0)
    with pytest.raises(ValueError, match="missing"):
        make_schedule("constant", lr=1.0)
    with pytest.raises(ValueError, match="total > warmup"):  # values are checked when the schedule is made
        make_schedule("cosine", warmup=10, total=5, lr=1.0)


def test_set_lr_resumes_exactly():
    schedule = make_schedule("inverse_sqrt", warmup=10, lr=1e-3)
    param = torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.SGD([{"params": [param]}, {"params": [torch.nn.Parameter(torch.zeros(1))]}], lr=123.0)
    for step in range(1, 31):
        set_lr(optimizer, schedule(step))
    assert [g["lr"] for g in optimizer.param_groups] == [schedule(30)] * 2
    # a resumed run needs only the step: the rate at step 31 is the same whatever happened before
    assert schedule(31) == pytest.approx(1e-3 * math.sqrt(10 / 31))
