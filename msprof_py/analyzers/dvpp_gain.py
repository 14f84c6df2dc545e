"""The modelled gain of moving an image loader's decoding onto DVPP (torchvision_npu's npu
image backend), from what a profile knows: the image batch's shape (N x C x H x W, from the
host-to-device copies), the chip's DVPP engines (the spec's ``[dvpp]`` section) and the
loader's wait per step with the device work already queued at it.

Per batch, DVPP decodes N images of H x W on JPEGD and runs one resize/crop pass of the same
size on VPC (where the chip has one), each spread over ``min(N, channels)`` channels at the
per-channel rate (:func:`msprof_py.device.dvpp.jpegd_ns` and :func:`~msprof_py.device.dvpp.vpc_ns`);
the two run one after the other. Submitted where the loader waited, the DVPP tasks run on
their own engines beside the device work already queued then (the backlog), so only the DVPP
time past that backlog leaves the device idle. Per step:

    gain = idle - max(0, dvpp - backlog)

the wait removed (its idle) minus the DVPP time not hidden, floored at 0; the median over
the steps. Assumptions: the source JPEGs are the batch's size (larger sources decode and
resize proportionally longer: the gain is then smaller), the host's own share of an npu
decode (reading the file, submitting) is left out, and so is the H2D copy of the batch the
device-side decode saves.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from msprof_py.device import dvpp

#: what :func:`model` assumes, for the finding's evidence
ASSUMPTIONS = (
    "source JPEGs of the batch's size (larger ones take proportionally longer), one JPEGD "
    "decode and one VPC resize/crop pass per image, then run one after the other; the "
    "host's own time for an npu decode and the H2D copy it saves are left out"
)


def batch_dims(image_batch: str) -> tuple[int, int, int, int]:
    """(N, C, H, W) of an ``"NxCxHxW"`` image-batch string (as ``image_batches`` gives it)."""
    n, c, h, w = (int(d) for d in image_batch.split("x"))
    return n, c, h, w


def batch_ns(spec: dvpp.DvppSpec, n: int, height: int, width: int) -> tuple[int, int]:
    """(JPEGD ns, VPC ns) of one batch of ``n`` images ``height`` x ``width`` on the chip;
    VPC 0 where the chip has none. Raises :class:`~msprof_py.device.dvpp.DvppError` when the
    engines do not take the images."""
    sizes: Sequence[tuple[int, int]] = [(width, height)] * n
    decode = dvpp.jpegd_ns(spec, sizes)[0]
    resize = dvpp.vpc_ns(spec, sizes, sizes)[0] if spec.has_vpc else 0
    return decode, resize


def model(
    spec: dvpp.DvppSpec,
    image_batch: str,
    idle_ns: Sequence[float],
    backlog_ns: Sequence[float],
) -> dict[str, Any]:
    """The DVPP time per batch and the modelled gain per step (us; see the module docs) for
    the steps whose loader idle and device backlog are ``idle_ns`` and ``backlog_ns``; a
    ``why`` instead where the engines do not take the images."""
    n, _, h, w = batch_dims(image_batch)
    try:
        decode, resize = batch_ns(spec, n, h, w)
    except dvpp.DvppError as exc:
        return {"why": str(exc)}
    total = float(decode + resize)
    idle = np.asarray(idle_ns, dtype=np.float64)
    backlog = np.asarray(backlog_ns, dtype=np.float64)
    exposed = np.clip(total - backlog, 0, None)
    gain = np.clip(idle - exposed, 0, None)
    return {
        "jpegd_us": decode / 1e3,
        "vpc_us": resize / 1e3,
        "dvpp_us": total / 1e3,
        "not_hidden_us": float(np.median(exposed)) / 1e3,
        "wait_removed_us": float(np.median(idle)) / 1e3,
        "gain_us": float(np.median(gain)) / 1e3,
        "assumptions": ASSUMPTIONS,
    }
