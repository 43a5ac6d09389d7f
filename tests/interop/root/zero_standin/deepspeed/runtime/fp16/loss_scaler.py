# SPDX-License-Identifier: MIT
"""Stand-in of deepspeed.runtime.fp16.loss_scaler: the loss scaler an optimizer states file
holds (an object pickled with its attributes): static (bf16) or dynamic (fp16)."""


class LossScalerBase:
    def __init__(self, cur_scale):
        self.cur_scale = cur_scale
        self.dynamic = False


class LossScaler(LossScalerBase):
    def __init__(self, scale=1):
        super().__init__(scale)


class DynamicLossScaler(LossScalerBase):
    def __init__(self, init_scale=2**16, scale_factor=2.0, scale_window=1000, min_scale=1,
                 delayed_shift=1, consecutive_hysteresis=False, raise_error_at_min_scale=True,
                 dtype=None):
        super().__init__(init_scale)
        self.cur_iter = 0
        self.last_overflow_iter = -1
        self.scale_factor = scale_factor
        self.scale_window = scale_window
        self.min_scale = min_scale
        self.delayed_shift = delayed_shift
        self.cur_hysteresis = delayed_shift
        self.consecutive_hysteresis = consecutive_hysteresis
        self.raise_error_at_min_scale = raise_error_at_min_scale
        self.dynamic = True
        self.dtype = dtype
