# SPDX-License-Identifier: MIT
"""Stand-in of deepspeed.utils: the logger zero_to_fp32.py imports."""
import logging

logger = logging.getLogger("deepspeed")
