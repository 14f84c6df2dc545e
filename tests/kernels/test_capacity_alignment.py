"""Buffer capacity and alignment errors: one line naming the buffer, the bytes and the limit."""

from __future__ import annotations

import numpy as np
import pytest

from msprof_py.kernels import (
    AlignmentError,
    BufferOverflowError,
    Chip,
    DataCopy,
    LoadData,
    TBuf,
    TPipe,
    TPosition,
    TQue,
    launch,
    tik,
)


def _init(position: TPosition, num: int, nbytes: int, *, chip: str = "ascend910b") -> None:
    def kernel() -> None:
        TPipe().InitBuffer(TQue(position, num, "inQueueX"), num, nbytes)

    launch(kernel, 1, chip=chip)


def test_chip_figures_come_from_the_preset() -> None:
    chip = Chip.load()
    assert chip.name == "ascend910b"
    assert chip.capacity["UB"] == 196608
    assert chip.capacity["L1"] == 524288
    assert chip.capacity["L0A"] == chip.capacity["L0B"] == 65536
    assert chip.capacity["L0C"] == 131072
    assert (chip.cube_cores, chip.vector_cores, chip.event_ids) == (24, 48, 8)
    assert chip.fractal["int8"] == (16, 32, 16)
    assert chip.alignment["L0A"] == 512 and chip.alignment["L0C"] == 64
    assert Chip.load("ascend910a").capacity["UB"] == 262144


def test_ub_overflow_names_buffer_request_and_limit() -> None:
    # two buffers of 100352 B: 200704 B > 196608 B of UB
    with pytest.raises(BufferOverflowError) as err:
        _init(TPosition.VECIN, 2, 100352)
    msg = str(err.value)
    assert "UB overflow: 200704 B requested, 196608 B available on ascend910b" in msg
    assert "\n" not in msg


def test_the_same_buffers_fit_the_larger_910a_ub() -> None:
    _init(TPosition.VECIN, 2, 100352, chip="ascend910a")  # 256 KiB UB


def test_overflow_counts_earlier_buffers_and_rounds_to_alignment() -> None:
    def kernel() -> None:
        pipe = TPipe()
        pipe.InitBuffer(TBuf(TPosition.VECCALC, "tmp"), 100)  # rounds up to 128 B
        pipe.InitBuffer(TQue(TPosition.A2, 1, "a2"), 1, 65536)
        pipe.InitBuffer(TQue(TPosition.VECOUT, 1, "out"), 1, 196608 - 128)  # exactly full
        pipe.InitBuffer(TQue(TPosition.VECIN, 1, "more"), 1, 32)

    with pytest.raises(BufferOverflowError, match=r"UB overflow: 196640 B requested, 196608 B"):
        launch(kernel, 1)

    def l0a() -> None:
        TPipe().InitBuffer(TQue(TPosition.A2, 1, "a2"), 1, 65537)  # rounds to 66048

    with pytest.raises(BufferOverflowError, match=r"L0A overflow: 66048 B requested, 65536 B"):
        launch(l0a, 1)


def test_misaligned_transfer_length_and_address() -> None:
    x = np.zeros(1024, np.float16)

    def short_copy(x) -> None:
        q = TQue(TPosition.VECIN, 1)
        TPipe().InitBuffer(q, 1, 2048)
        DataCopy(q.AllocTensor("float16"), x, 50)  # 100 B

    with pytest.raises(AlignmentError, match=r"100 B is not a multiple of 32 B \(UB alignment\)"):
        launch(short_copy, 1, x)

    def odd_address(x) -> None:
        q = TQue(TPosition.VECIN, 1)
        TPipe().InitBuffer(q, 1, 2048)
        DataCopy(q.AllocTensor("float16")[1:], x, 16)  # starts at byte 2

    with pytest.raises(AlignmentError, match=r"UB address misaligned: .* byte 2, not a multiple"):
        launch(odd_address, 1, x)

    def l0a_address() -> None:
        pipe = TPipe()
        a1, a2 = TQue(TPosition.A1, 1), TQue(TPosition.A2, 1)
        pipe.InitBuffer(a1, 1, 4096)
        pipe.InitBuffer(a2, 1, 4096)
        LoadData(a2.AllocTensor("float16")[16:], a1.AllocTensor("float16"), 512)  # byte 32

    with pytest.raises(AlignmentError, match=r"L0A address misaligned: .* not a multiple of 512"):
        launch(l0a_address, 1)


def test_tik_tensor_overflow_is_checked_at_declaration() -> None:
    t = tik.Tik()
    t.Tensor("float16", (65536,), name="a", scope=tik.scope_ubuf)  # 128 KiB
    with pytest.raises(BufferOverflowError, match=r"UB overflow: 262144 B requested, 196608 B"):
        t.Tensor("float16", (65536,), name="b", scope=tik.scope_ubuf)
