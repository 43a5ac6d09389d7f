# SPDX-License-Identifier: MIT
"""Stand-in of deepspeed.utils.tensor_fragment: the record of where a parameter's fragment is in
a rank's partition (param_slice_mappings), a dataclass of two ints."""
from dataclasses import dataclass


@dataclass
class fragment_address:
    numel: int
    start: int
