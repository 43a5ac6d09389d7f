# SPDX-License-Identifier: MIT
"""Stand-in of deepspeed.checkpoint.constants: the key names zero_to_fp32.py imports, as
DeepSpeed's checkpoints spell them."""
OPTIMIZER_STATE_DICT = "optimizer_state_dict"
FP32_FLAT_GROUPS = "fp32_flat_groups"
SINGLE_PARTITION_OF_FP32_GROUPS = "single_partition_of_fp32_groups"
ZERO_STAGE = "zero_stage"
PARTITION_COUNT = "partition_count"
PARAM_SHAPES = "param_shapes"
BUFFER_NAMES = "buffer_names"
FROZEN_PARAM_SHAPES = "frozen_param_shapes"
FROZEN_PARAM_FRAGMENTS = "frozen_param_fragments"
DS_VERSION = "ds_version"
