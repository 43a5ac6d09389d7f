# SPDX-License-Identifier: MIT
"""A stand-in for the `deepspeed` package (none exists for Debian), for the ZeRO interop tests
only: what zero_to_fp32.py imports (a logger, the checkpoint's key names) and the classes whose
instances DeepSpeed pickles into its checkpoints (ZeroStageEnum, the loss scalers,
fragment_address), under DeepSpeed's own module names, so that the fixtures written with them
hold the globals real checkpoints hold, and zero_to_fp32.py can load them. Written from
DeepSpeed's checkpoint layout; none of its code.
"""
