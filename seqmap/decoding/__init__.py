"""Decoding: functions over the model protocol (``encode`` / ``decode_step``), never over a model class.

``greedy`` and ``sample`` take one token per step; ``beam_search`` keeps k
hypotheses per sentence; ``seqmap.decoding.text`` wraps them for text in, text
out under a token budget.
"""

from seqmap.decoding.beam import BeamResult, beam_search
from seqmap.decoding.greedy import GreedyResult, greedy
from seqmap.decoding.ranking import Hypothesis
from seqmap.decoding.sampling import sample

__all__ = ["BeamResult", "GreedyResult", "Hypothesis", "beam_search", "greedy", "sample"]
