"""Training: the one training loop (``trainer.py``), a config on real data set up as a run directory
(``run_trainer.py``) and the toy run on synthetic tasks (``toy.py``).

Also the loss, schedules, distributed setup and the run log; checkpoints are saved through ``seqmap.checkpoints``.
"""

from seqmap.training.toy import ToyConfig, ToyRun, train_toy

__all__ = ["ToyConfig", "ToyRun", "train_toy"]
