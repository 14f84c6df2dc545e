"""``torch.npu.config`` (= ``torch_npu.npu.config``): process-wide switches of the npu device.

``allow_internal_format`` chooses whether convolutions keep NPU-private formats (NC1HWC0
activations, FRACTAL_Z weights) and pay TransData where a consumer needs ND (True, torch_npu's
default on Atlas A1/A2 and the inference chips, the chips the presets model), or every tensor
stays ND and no TransData is launched (False, torch_npu's default on A3). Explicit
``torch_npu.npu_format_cast`` still converts either way.
"""

from __future__ import annotations

from msprof_py.adapter import backend, runtime


class NpuConfig:
    """The ``torch.npu.config`` object: attributes read and written like torch_npu's."""

    @property
    def allow_internal_format(self) -> bool:
        """True when ops may keep NPU-private formats (and TransData is launched for them)."""
        return runtime.state().internal_format

    @allow_internal_format.setter
    def allow_internal_format(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"allow_internal_format must be True or False, got {value!r}")
        state = runtime.state()
        if state.internal_format != value:
            state.internal_format = value
            # a learned convolution launch tags its outputs as the setting was
            backend.forget_learned_launches()

    def __repr__(self) -> str:
        return f"torch.npu.config(allow_internal_format={self.allow_internal_format})"


#: the single ``torch.npu.config`` instance
config = NpuConfig()
