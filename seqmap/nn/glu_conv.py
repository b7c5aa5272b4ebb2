"""Gated convolutions (Dauphin et al. 2017), the layers of ConvS2S (Gehring et al. 2017).

    GLUConv(x)       = GLU(Conv1d(Dropout(x)))        centred: output t reads inputs t - (k-1)//2 .. t + k//2
    CausalGLUConv(x) = the same over the k - 1 previous inputs and x_t only

GLU(A; B) = A * sigmoid(B): the convolution makes 2C channels, half of them gate the other half.
The causal variant keeps its k - 1 previous inputs as a window (zeros before the first token), so
decoding one token at a time costs one position per step and gives what the whole sequence gives.

Initialisation keeps the variance of activations (Gehring et al., section 3.5): weights are drawn
from N(0, sqrt(g q / n)) with n the inputs of a unit, q the keep probability of the dropout before
the layer (1 without one) and g = 4 for a layer followed by a GLU (it quarters the variance), else 1.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqmap.nn.dropout import Dropout


def scaled_normal_(weight: Tensor, fan_in: int, dropout: float = 0.0, gain: float = 1.0) -> Tensor:
    """N(0, sqrt(gain (1 - dropout) / fan_in)): the variance-keeping init (module docstring), in place."""
    return nn.init.normal_(weight, std=math.sqrt(gain * (1.0 - dropout) / fan_in))


def scaled_linear(in_features: int, out_features: int, dropout: float = 0.0, bias: bool = True) -> nn.Linear:
    """A Linear initialised for ``dropout`` on its input and no GLU after it; zero bias."""
    linear = nn.Linear(in_features, out_features, bias=bias)
    scaled_normal_(linear.weight, in_features, dropout)
    if bias:
        nn.init.zeros_(linear.bias)
    return linear


class GLUConv(nn.Module):
    """Dropout, a 1-D convolution of width k from C to 2C channels, a GLU: (B, T, C) -> (B, T, C).

    Centred, with zeros beyond both ends (an even k reads one more input on the right). A caller
    with padding zeroes the padded positions of ``x`` first, so that they read as those zeros.
    """

    def __init__(self, channels: int, kernel_size: int, dropout: float = 0.0):
        super().__init__()
        if kernel_size < 1:
            raise ValueError(f"kernel_size must be >= 1, got {kernel_size}")
        self.kernel_size = kernel_size
        self.dropout = Dropout(dropout)
        self.conv = nn.Conv1d(channels, 2 * channels, kernel_size)
        scaled_normal_(self.conv.weight, kernel_size * channels, dropout, gain=4.0)
        nn.init.zeros_(self.conv.bias)

    def glu(self, x: Tensor) -> Tensor:
        """Inputs with their context (B, T + k - 1, C) -> (B, T, C)."""
        if x.size(1) < self.kernel_size:  # no position to compute (T = 0): conv1d refuses a short input
            return x.new_zeros(x.size(0), x.size(1) - self.kernel_size + 1, x.size(2))
        return F.glu(self.conv(x.transpose(1, 2)), dim=1).transpose(1, 2)  # (B, 2C, T) -> (B, T, C)

    def forward(self, x: Tensor) -> Tensor:
        k = self.kernel_size
        return self.glu(F.pad(self.dropout(x), (0, 0, (k - 1) // 2, k // 2)))  # (B, T + k - 1, C)


class CausalGLUConv(GLUConv):
    """The causal ``GLUConv``: output t reads inputs t - k + 1 .. t, with a window of the inputs before x."""

    def forward(self, x: Tensor, window: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """x (B, t, C), window (B, k - 1, C) the k - 1 inputs before x (None: the start, zeros)
        -> (output (B, t, C), the window after x (B, k - 1, C))."""
        x = self.dropout(x)
        if window is None:
            window = x.new_zeros(x.size(0), self.kernel_size - 1, x.size(2))
        inputs = torch.cat([window, x], dim=1)  # (B, k - 1 + t, C)
        return self.glu(inputs), inputs[:, inputs.size(1) - window.size(1):]
