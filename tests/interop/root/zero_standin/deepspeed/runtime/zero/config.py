# SPDX-License-Identifier: MIT
"""Stand-in of deepspeed.runtime.zero.config: the stage an optimizer states file records (an int
enum, pickled as a call of this class with the stage)."""
from enum import Enum


class ZeroStageEnum(int, Enum):
    disabled = 0
    optimizer_states = 1
    gradients = 2
    weights = 3
    max_stage = 3
