"""The CUDA lane's driver calls as a GPU receives them, recorded on the cpu tier (no GPU runs them here): a put's
order (the wait for the current stream, the flag wait, the copies, the signal), several tiles in one batched call
outside a capture and one 2-D copy each inside one or where the driver refuses the batch, and the batched call's
operation array laid out as cuda.h's CUDA_MEMCPY3D_BATCH_OP."""

import struct
import types

import torch

from iris.host.copy_engine import lanes
from iris.host.copy_engine.lanes import Copy, Signal, Transfer, Wait
from iris.platform import cuda_driver


def test_batch_ops_are_cuda_memcpy3d_batch_ops():
    copies = [Copy(0x7F0000001000, 4096, 0x7E0000002000, 8192, 512, 128), Copy(17, 1024, 33, 2048, 100, 3)]
    raw = cuda_driver.batch_ops(copies).tobytes()
    assert len(raw) == 2 * 112
    for i, (dst, dst_pitch, src, src_pitch, width, height) in enumerate(copies):
        op = raw[112 * i:112 * (i + 1)]
        # CUmemcpy3DOperand src at 0 and dst at 40: int type, 4 bytes of padding, ptr, rowLength, layerHeight, hint
        assert struct.unpack_from("<i", op, 0)[0] == struct.unpack_from("<i", op, 40)[0] == 1  # POINTER
        assert struct.unpack_from("<QQQii", op, 8) == (src, src_pitch, height, 0, 0)
        assert struct.unpack_from("<QQQii", op, 48) == (dst, dst_pitch, height, 0, 0)
        assert struct.unpack_from("<QQQ", op, 80) == (width, height, 1)  # CUextent3D in bytes, rows, one layer
        assert struct.unpack_from("<iI", op, 104) == (1, 0)  # CU_MEMCPY_SRC_ACCESS_ORDER_STREAM, flags


class _Driver:
    """``cuda_driver`` as the lane calls it, recording each call; ``batch`` is what the batched copy returns."""

    def __init__(self, batch=0):
        self.calls, self.batch = [], batch

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)

        def call(*args):
            self.calls.append((name, *args))
            if name == "copy_2d_batch":
                return self.batch
            return 0 if name != "event_create" else 99

        return call


def _lane(monkeypatch, driver):
    monkeypatch.setattr(lanes, "cuda_driver", driver)
    monkeypatch.setattr(lanes.private, "current_stream", lambda index: 1000 + index)
    monkeypatch.setattr(torch.cuda, "Stream", lambda device: types.SimpleNamespace(cuda_stream=55))
    signal = types.SimpleNamespace(check=lambda value, caller: None,
                                   launch=lambda handle, flag: driver.calls.append(("signal", handle, flag)))
    lane = lanes.CudaLane(types.SimpleNamespace(get_device=lambda: torch.device("cuda", 3)), signal=signal)
    driver.calls.clear()
    return lane


TILES = (Copy(100, 4096, 200, 8192, 512, 128), Copy(612, 4096, 712, 8192, 512, 128), Copy(9, 64, 7, 64, 32, 2))


def test_a_put_is_the_stream_wait_the_flag_wait_one_copy_and_the_signal(monkeypatch):
    driver = _Driver()
    lane = _lane(monkeypatch, driver)
    wait, signal = Wait(4096, 64, 5), Signal(8192, 32, 1)
    lane.transfer(Transfer(wait, (Copy(300, 64, 400, 64, 64, 1),), signal), "Iris.put")
    assert driver.calls == [("order_after", 55, 99, 1003), ("stream_wait_at_least_64", 55, 4096, 5),
                            ("copy_1d", 300, 400, 64, 55), ("signal", 55, signal)]


def test_tiles_go_in_one_batched_call_outside_a_capture(monkeypatch):
    driver = _Driver()
    lane = _lane(monkeypatch, driver)
    lane.transfer(Transfer(None, TILES, None), "Iris.put_tiles")
    assert driver.calls == [("order_after", 55, 99, 1003), ("copy_2d_batch", TILES, 55)]


def test_tiles_go_one_by_one_in_a_capture_or_where_the_driver_refuses(monkeypatch):
    one_by_one = [("copy_2d", 100, 4096, 200, 8192, 512, 128, 55), ("copy_2d", 612, 4096, 712, 8192, 512, 128, 55),
                  ("copy_2d", 9, 64, 7, 64, 32, 2, 55)]
    driver = _Driver()
    made = [_lane(monkeypatch, driver)]  # kept: a lane destroys its event when collected
    made[-1].transfer(Transfer(None, TILES, None), "Iris.put_tiles", capturing=True)
    assert driver.calls == [("order_after", 55, 99, 1003), *one_by_one]
    for refused in (-1, 1):  # no batched call in this driver; the driver's error
        driver = _Driver(batch=refused)
        made.append(_lane(monkeypatch, driver))
        made[-1].transfer(Transfer(None, TILES, None), "Iris.put_tiles")
        assert driver.calls == [("order_after", 55, 99, 1003), ("copy_2d_batch", TILES, 55), *one_by_one]
