"""nbrmm as a drop-in for rmm 26.10, rule by rule (rule 1, the module layout, is checked in
tests/test_rmm_api.py).

- Rule 2: a call that raises ``E`` in rmm raises an instance of ``E`` (the table in
  tests/rmm_cases.py, checked against rmm itself by scripts/check_rmm_cases.py).
- Rule 5: each row of docs/differences.md has a test ``test_difference_<row>``.
- Rule 6: unchanged rmm programs run on nbrmm through ``python -m nbrmm.compat``.

Plus the functions rmm has and nbrmm adds for it: the raw-pointer copies of
``nbrmm.pylibrmm.device_buffer``, ``helper.parse_bytes`` and ``utils.as_stream``.
"""

import ctypes
import gc
import os
import pathlib
import pickle
import re
import subprocess
import sys

import pytest

import nbrmm
import nbrmm.mr as mr
import nbrmm.statistics
from helpers import POOL_SIZE, HostHeap, run_python, table_rows
from nbrmm.pylibrmm import device_buffer, helper, utils
from rmm_cases import CASES, V1Stream

HAVE_GPU = nbrmm.get_device_count() > 0
ROOT = pathlib.Path(__file__).resolve().parent.parent
PROGRAMS = pathlib.Path(__file__).resolve().parent / "rmm_programs"


class ForeignStream:
    """A stream of another library: it only implements the CUDA stream protocol."""

    def __init__(self, handle=0):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


# --------------------------------------------------------------------------------------
# Rule 2: the exception classes rmm raises
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_rule2_raises_an_instance_of_what_rmm_raises(case):
    heap = HostHeap()
    with pytest.raises(case.rmm_raises) as info:
        case.call(nbrmm, heap.resource())
    if case.match is not None:
        assert re.search(case.match, str(info.value)), str(info.value)
    del info
    gc.collect()
    assert heap.bytes_in_use == 0  # nothing leaks on the way out


def test_rule2_the_table_covers_each_known_difference_of_the_issue():
    ids = {c.id for c in CASES}
    assert {
        "Pool-initial-exceeds-maximum",
        "reinitialize-size-2k",
        "Pool-size-2k",
        "set_logging_level-int",
        "Stream-flags-with-existing",
        "Stream-protocol-v1",
        "allocate-stream-None",
    } <= ids
    # stream=None is refused by every rmm function with a stream parameter (all but
    # DeviceBuffer.prefetch, where None means the buffer's own stream, as in rmm).
    assert sum(c.id.endswith("-stream-None") for c in CASES) == 14


@pytest.mark.parametrize(
    "call",
    [
        lambda r: nbrmm.Buffer(8, mr=r, stream=None),
        lambda r: nbrmm.Buffer(8, mr=r).reserve(16, stream=None),
        lambda r: nbrmm.Buffer(8, mr=r).shrink_to_fit(None),
        lambda r: nbrmm.Buffer.to_device(b"x", None, mr=r),
        lambda r: utils.as_stream(None),
    ],
    ids=["Buffer", "reserve", "shrink_to_fit", "Buffer.to_device", "as_stream"],
)
def test_rule2_stream_none_names_the_parameter_in_nbrmms_own_calls(call):
    with pytest.raises(TypeError, match="^stream: stream argument cannot be None"):
        call(HostHeap().resource())


def test_rule2_stream_protocol_version_is_named():
    with pytest.raises(NotImplementedError, match="returned version 2 .*supports version 0"):
        nbrmm.Stream(type("V2", (), {"__cuda_stream__": lambda self: (2, 0)})())
    with pytest.raises(TypeError, match="^stream: .*version 1"):
        HostHeap().resource().allocate(8, V1Stream())


def test_rule2_unparseable_size_strings_say_could_not_parse():
    for text in ("2k", "lots", "1e3", " 1KiB", "1 K iB", "-5"):
        with pytest.raises(ValueError, match=f"^initial_pool_size: Could not parse '{re.escape(text)}'"):
            mr.PoolMemoryResource(HostHeap().resource(), text)


@pytest.mark.gpu
def test_rule2_reinitialize_initial_exceeds_maximum_is_a_runtime_error():
    before = mr.get_current_device_resource()
    with pytest.raises(RuntimeError, match="exceeds the maximum pool size") as info:
        nbrmm.reinitialize(pool_allocator=True, initial_pool_size=2 * POOL_SIZE,
                           maximum_pool_size=POOL_SIZE)
    assert isinstance(info.value, ValueError)
    assert mr.get_current_device_resource() is before


# --------------------------------------------------------------------------------------
# Functions rmm has that nbrmm adds for it
# --------------------------------------------------------------------------------------


PARSED = [
    ("0", 0), ("1", 1), ("1.", 1), ("1.5", 1), ("10 B", 10), ("10b", 10),
    ("1kb", 1000), ("1 KB", 1000), ("1KiB", 1024), ("1.5 kib", 1536), ("1\tMB", 10**6),
    ("2 MiB", 2 << 20), ("1GB", 10**9), ("1 GiB", 1 << 30), ("1tb", 10**12),
    ("1 TiB", 1 << 40), ("1pb", 10**15), ("1 PiB", 1 << 50), ("0.5 GiB", 1 << 29),
    ("16 PiB", 16 << 50), ("7 ", 7), ("3\n", 3), (12345, 12345),
    # More digits than a float holds: too small to be a byte (rmm's float() gives 0.0).
    ("0." + "0" * 400 + "1", 0), ("0." + "0" * 400 + "1 PiB", 0),
]
REFUSED = [
    ("2k", ValueError), ("1 g", ValueError), (".5", ValueError), ("", ValueError),
    ("1.5.5", ValueError), ("1 k b", ValueError), ("+1", ValueError), ("1,5", ValueError),
    ("1KiB ", ValueError), ("1e3", ValueError), ("0x10", ValueError),
    (-1, OverflowError), (2**64, OverflowError), ("99999 PiB", OverflowError),
    # More digits than a float holds: rmm's float() gives inf, and int() OverflowError.
    ("1" + "0" * 400, OverflowError), ("9" * 309 + ".5 kB", OverflowError),
    ("1" + "0" * 400 + " xB", ValueError),
    (1.5, TypeError), (True, TypeError), (None, TypeError), (b"1", TypeError),
]


def test_parse_bytes_reads_rmms_grammar():
    # The values rmm's parse_bytes gives for the same strings.
    assert [helper.parse_bytes(text) for text, _ in PARSED] == [size for _, size in PARSED]


def test_parse_bytes_refuses():
    for value, exc in REFUSED:
        with pytest.raises(exc, match="^s: "):
            helper.parse_bytes(value)


def test_a_size_string_too_large_for_64_bits_is_an_overflow_error_naming_the_parameter():
    heap = HostHeap()
    for text in ("1" + "0" * 20, "1" + "0" * 400, "1" + "0" * 400 + ".25 GiB"):
        too_large = "^initial_pool_size: '.*' is 2\\*\\*64 bytes or more"
        with pytest.raises(OverflowError, match=too_large):
            mr.PoolMemoryResource(heap.resource(), text)
        with pytest.raises(nbrmm.ArgumentRangeError, match="^nbytes: "):
            nbrmm.Buffer(text, mr=heap.resource())
    assert heap.bytes_in_use == 0


def test_modules_reachable_in_rmm_are_reachable_here():
    # rmm.rmm imports rmm.mr, and rmm.pylibrmm.memory_resource.experimental its base class.
    import nbrmm.rmm
    from nbrmm.pylibrmm.memory_resource import experimental

    assert nbrmm.rmm.mr is nbrmm.mr
    assert experimental.DeviceMemoryResource is nbrmm.mr.DeviceMemoryResource
    assert issubclass(experimental.CudaAsyncManagedMemoryResource,
                      experimental.DeviceMemoryResource)
    out = run_python(
        """
        import nbrmm.compat
        nbrmm.compat.install()
        import rmm.rmm, rmm.pylibrmm.memory_resource.experimental as ex
        print(rmm.rmm.mr is rmm.mr, ex.DeviceMemoryResource is rmm.mr.DeviceMemoryResource)
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True"]


def test_as_stream():
    stream = nbrmm.DEFAULT_STREAM
    assert utils.as_stream(stream) is stream
    foreign = ForeignStream(0)
    wrapped = utils.as_stream(foreign)
    assert isinstance(wrapped, nbrmm.Stream) and wrapped.owner is foreign
    for bad in (5, "s", V1Stream()):
        with pytest.raises(TypeError, match="^stream:"):
            utils.as_stream(bad)


def test_pointer_copies_of_nothing_need_no_cuda():
    device_buffer.copy_ptr_to_host(0, bytearray(0))
    device_buffer.copy_host_to_ptr(b"", 0)
    device_buffer.copy_device_to_ptr(0, 0, 0)
    device_buffer.copy_ptr_to_host(0, bytearray(0), ForeignStream(0))


def test_pointer_copies_refuse_memory_cuda_does_not_know():
    host = ctypes.create_string_buffer(64)
    addr = ctypes.addressof(host)
    calls = [
        lambda: device_buffer.copy_ptr_to_host(addr, bytearray(16)),
        lambda: device_buffer.copy_host_to_ptr(b"x" * 16, addr),
        lambda: device_buffer.copy_device_to_ptr(addr, addr + 32, 16),
    ]
    for call in calls:
        with pytest.raises(RuntimeError) as info:  # rmm: RuntimeError("Memcpy failed ...")
            call()
        if HAVE_GPU:
            assert isinstance(info.value, nbrmm.InvalidArgumentError)
            assert "not memory that CUDA knows" in str(info.value)
        else:
            assert isinstance(info.value, nbrmm.CudaError)
    assert host.raw == b"\0" * 64


def test_pointer_copies_check_their_arguments_before_cuda():
    with pytest.raises(OverflowError, match="^db: .*64 bits"):
        device_buffer.copy_ptr_to_host(2**64, bytearray(1))
    with pytest.raises(TypeError, match="^db: expected an int, got str"):
        device_buffer.copy_host_to_ptr(b"x", "0x10")
    with pytest.raises(TypeError, match="^d_dst:"):
        device_buffer.copy_device_to_ptr(0, 1.5, 1)
    with pytest.raises(TypeError, match="^count:"):
        device_buffer.copy_device_to_ptr(0, 0, "1 KiB")
    with pytest.raises(TypeError, match="^stream:"):
        device_buffer.copy_ptr_to_host(0, bytearray(1), "default")


@pytest.mark.gpu
def test_pointer_copies_round_trip():
    cuda = mr.CudaMemoryResource()
    payload = bytes(range(256)) * 8
    src = nbrmm.DeviceBuffer.to_device(payload, mr=cuda)
    dst = nbrmm.DeviceBuffer(size=len(payload), mr=cuda)
    device_buffer.copy_device_to_ptr(src.ptr, dst.ptr, len(payload))
    host = bytearray(len(payload))
    device_buffer.copy_ptr_to_host(dst.ptr, host)
    assert bytes(host) == payload
    device_buffer.copy_host_to_ptr(b"\xaa" * 100, dst.ptr + 10)
    assert dst.tobytes() == payload[:10] + b"\xaa" * 100 + payload[110:]
    # On another stream the copies are asynchronous: synchronize before reading.
    stream = nbrmm.Stream()
    out = bytearray(len(payload))
    device_buffer.copy_device_to_ptr(src.ptr, dst.ptr, len(payload), stream)
    device_buffer.copy_ptr_to_host(dst.ptr, out, stream)
    stream.synchronize()
    assert bytes(out) == payload
    # Managed memory is memory CUDA knows too.
    managed = nbrmm.DeviceBuffer(size=64, mr=mr.ManagedMemoryResource())
    device_buffer.copy_host_to_ptr(b"m" * 64, managed.ptr)
    assert managed.tobytes() == b"m" * 64


@pytest.mark.gpu
def test_pointer_copies_stay_inside_the_allocation():
    cuda = mr.CudaMemoryResource()
    size = 2 << 20
    ptr = cuda.allocate(size)
    try:
        end = ptr + size
        with pytest.raises(nbrmm.InvalidArgumentError, match="^db: the 64 bytes .* run past"):
            device_buffer.copy_ptr_to_host(end - 16, bytearray(64))
        with pytest.raises(nbrmm.InvalidArgumentError, match="^db: .* run past"):
            device_buffer.copy_host_to_ptr(b"x" * 64, end - 16)
        with pytest.raises(nbrmm.InvalidArgumentError, match="^d_dst: .* run past"):
            device_buffer.copy_device_to_ptr(ptr, end - 16, 64)
        device_buffer.copy_host_to_ptr(b"y" * 16, end - 16)  # the last bytes are fine
        back = bytearray(16)
        device_buffer.copy_ptr_to_host(end - 16, back)
        assert back == b"y" * 16
    finally:
        cuda.deallocate(ptr, size)


# --------------------------------------------------------------------------------------
# Rule 5: each row of docs/differences.md
# --------------------------------------------------------------------------------------

DIFFERENCES = ROOT / "docs" / "differences.md"


def _difference_rows():
    rows = table_rows(DIFFERENCES.read_text())
    assert rows[0] == ["Row", "rmm 26.10", "nbrmm", "Why"]
    return [r[0] for r in rows[2:]]


def test_the_examples_of_the_page_and_modules_run():
    # In a fresh interpreter: the compat examples need a process where the real rmm
    # (which other tests may import) is not imported.
    out = run_python(
        f"""
        import doctest, sys
        import nbrmm.compat
        from nbrmm.pylibrmm import helper, utils
        assert doctest.testfile({str(DIFFERENCES)!r}, module_relative=False).failed == 0
        for module in (nbrmm.compat, helper, utils):
            result = doctest.testmod(module)
            assert result.failed == 0 and result.attempted > 0, module
        assert not nbrmm.compat.installed() and "rmm" not in sys.modules
        print("ok")
        """
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().endswith("ok")


def test_every_difference_row_has_its_test():
    rows = _difference_rows()
    assert len(rows) >= 18
    tests = {name for name in globals() if name.startswith("test_difference_")}
    expected = {"test_difference_" + row.replace("-", "_") for row in rows}
    assert expected == tests


def test_difference_cpp_resource_cast():
    from extensions import testing

    heap = HostHeap()
    stats = nbrmm.mr.StatisticsResourceAdaptor(heap.resource())
    # Made in Python: the wrapper carries the object; C++ sees neither a cache nor itself.
    with pytest.raises(TypeError, match="not a host_cache_resource"):
        testing.live_bytes(stats)
    # Made in C++: C++ gets its own resource back and can resource_cast it.
    cache = testing.host_cache_resource()
    nbrmm.mr.set_current_device_resource(cache)
    assert testing.live_bytes(nbrmm.mr.get_current_device_resource()) == 0
    buf = nbrmm.Buffer(100)
    assert testing.live_bytes(cache) == 256 and buf.mr == cache
    buf.close()


def test_difference_callback_exceptions():
    heap = HostHeap()

    class Boom(Exception):
        pass

    err = Boom("raised by the callback")

    def allocate(nbytes, stream):
        raise err

    with pytest.raises(Boom) as info:
        mr.CallbackMemoryResource(allocate, heap.deallocate).allocate(8)
    assert info.value is err  # the very object, not RuntimeError(str(err))

    def interrupted(nbytes, stream):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        mr.CallbackMemoryResource(interrupted, heap.deallocate).allocate(8)

    class Subclass(mr.DeviceMemoryResource):
        def allocate(self, nbytes, stream=nbrmm.DEFAULT_STREAM):
            raise err

        def deallocate(self, ptr, nbytes, stream=nbrmm.DEFAULT_STREAM):
            pass

    with pytest.raises(Boom):
        nbrmm.DeviceBuffer(size=8, mr=Subclass())
    with pytest.raises(TypeError, match="allocate"):  # rmm: RuntimeError
        mr.CallbackMemoryResource(lambda n, s: "0x10", heap.deallocate).allocate(8)
    with pytest.raises(RuntimeError, match="not a pointer value") as bad:  # rmm: RuntimeError
        mr.CallbackMemoryResource(lambda n, s: -1, heap.deallocate).allocate(8)
    assert isinstance(bad.value, ValueError)
    assert heap.bytes_in_use == 0


@pytest.mark.gpu
def test_difference_cupy_memory_owner():
    cupy = pytest.importorskip("cupy")
    from nbrmm.allocators.cupy import Memory, cupy_allocator

    pool = mr.PoolMemoryResource(mr.CudaMemoryResource(), POOL_SIZE)
    with cupy.cuda.using_allocator(cupy_allocator(mr=pool)):
        x = cupy.zeros(100, dtype=cupy.uint8)
    mem = x.data.mem
    assert type(mem) is Memory is cupy.cuda.UnownedMemory and mem.size >= 100
    assert not isinstance(mem._owner, (nbrmm.Buffer, mr.DeviceMemoryResource))


def test_difference_cuda_array_interface():
    heap = HostHeap()
    buf = nbrmm.DeviceBuffer(size=16, mr=heap.resource())
    cai = buf.__cuda_array_interface__
    assert cai["version"] == 3 and cai["stream"] == 1  # the legacy default stream
    assert cai["data"] == (buf.ptr, False) and cai["shape"] == (16,) and cai["typestr"] == "|u1"
    other = nbrmm.DeviceBuffer(size=16, mr=heap.resource(), stream=ForeignStream(0x1234))
    assert other.__cuda_array_interface__["stream"] == 0x1234


def test_difference_to_device_any_buffer():
    np = pytest.importorskip("numpy")
    heap = HostHeap()
    empty_2d = np.zeros((0, 4), dtype=np.int32)  # rmm: ValueError (not 1-D bytes)
    buf = device_buffer.to_device(empty_2d, mr=heap.resource())
    assert isinstance(buf, nbrmm.DeviceBuffer) and buf.size == 0
    ints = np.zeros(0, dtype=np.int32)  # rmm: ValueError (dtype mismatch)
    buf.copy_from_host(ints)
    assert buf.copy_to_host(ints) is ints
    device_buffer.copy_ptr_to_host(0, ints)
    if HAVE_GPU:
        grid = np.arange(12, dtype=np.int32).reshape(3, 4)
        up = device_buffer.to_device(grid)
        assert up.size == grid.nbytes and up.tobytes() == grid.tobytes()
        back = np.empty_like(grid)
        up.copy_to_host(back)
        assert (back == grid).all()


def test_difference_foreign_streams():
    heap = HostHeap()
    seen = []

    def allocate(nbytes, stream):
        seen.append(stream.handle)
        return heap.allocate(nbytes, stream)

    r = mr.CallbackMemoryResource(allocate, heap.deallocate)
    foreign = ForeignStream(0)
    ptr = r.allocate(64, foreign)  # rmm: TypeError (not an rmm Stream)
    r.deallocate(ptr, 64, foreign)
    buf = nbrmm.DeviceBuffer(size=32, mr=r, stream=ForeignStream(0))
    assert buf.stream.owner.__class__ is ForeignStream
    assert seen == [0, 0]
    del buf
    assert heap.bytes_in_use == 0


def test_difference_size_arguments():
    heap = HostHeap()
    r = heap.resource()
    ptr = r.allocate("1 KiB")  # rmm: TypeError
    assert heap.live == {ptr: 1024}
    r.deallocate(ptr, "1KiB")
    assert nbrmm.DeviceBuffer(size="2KiB", mr=r).size == 2048
    assert mr.LimitingResourceAdaptor(r, "1 MiB").get_allocation_limit() == 1 << 20
    for bad in (1.5, True):  # rmm: allocates 1 byte
        with pytest.raises(TypeError, match="^nbytes:"):
            r.allocate(bad)
    with pytest.raises(TypeError, match="^device:"):
        mr.get_per_device_resource(0.5)  # rmm: device 0
    assert heap.bytes_in_use == 0


def test_difference_bool_arguments():
    r = HostHeap().resource()
    with pytest.raises(TypeError, match="^capture_stacks:"):
        mr.TrackingResourceAdaptor(r, capture_stacks=1)  # rmm: True
    with pytest.raises(TypeError, match="^dump_log_on_failure:"):
        mr.ArenaMemoryResource(r, 1 << 20, 1)
    with pytest.raises(TypeError, match="^enable_ipc:"):
        mr.CudaAsyncMemoryResource(enable_ipc=1)
    assert mr.TrackingResourceAdaptor(r, capture_stacks=True).get_allocated_bytes() == 0


def test_difference_exception_classes_and_messages():
    r = HostHeap().resource()
    with pytest.raises(nbrmm.InvalidArgumentError) as info:
        mr.PoolMemoryResource(r, 8192, 4096)
    message = str(info.value)
    assert isinstance(info.value, ValueError) and isinstance(info.value, RuntimeError)
    assert message.startswith("initial_pool_size: ") and "/" not in message
    with pytest.raises(nbrmm.ArgumentRangeError, match="^nbytes: must be non-negative, got -1$"):
        r.allocate(-1)
    assert issubclass(nbrmm.ArgumentRangeError, (ValueError, OverflowError))
    assert issubclass(nbrmm.OutOfMemory, nbrmm.BadAlloc) and issubclass(nbrmm.BadAlloc, MemoryError)
    assert issubclass(nbrmm.CudaError, RuntimeError) and issubclass(nbrmm.LogicError, RuntimeError)
    assert issubclass(nbrmm.FileOpenError, (OSError, RuntimeError))
    with pytest.raises(nbrmm.OutOfMemory):
        mr.LimitingResourceAdaptor(r, 100).allocate(200)


def test_difference_fixed_size_block_zero():
    with pytest.raises(ValueError, match="^block_size:"):  # rmm: the process dies (SIGFPE)
        mr.FixedSizeMemoryResource(HostHeap().resource(), block_size=0)


def test_difference_binning_exponents():
    heap = HostHeap()
    r = heap.resource()
    with pytest.raises(nbrmm.ArgumentRangeError, match="^max_size_exponent:"):
        mr.BinningMemoryResource(r, 10)  # rmm: no bins at all
    with pytest.raises(ValueError, match="^max_size_exponent: 5 is smaller"):
        mr.BinningMemoryResource(r, 10, 5)  # rmm: no bins at all
    with pytest.raises(OverflowError, match="^min_size_exponent:"):
        mr.BinningMemoryResource(r, -5, 10)  # rmm: MemoryError
    assert mr.BinningMemoryResource(r).bin_mrs == []
    assert heap.bytes_in_use == 0


def test_difference_arguments_checked_early():
    r = HostHeap().resource()
    with pytest.raises(TypeError, match="^allocate_func:"):
        mr.CallbackMemoryResource(5, 6)
    with pytest.raises(TypeError, match="^callback:"):
        mr.FailureCallbackResourceAdaptor(r, 5)
    with pytest.raises(TypeError, match="^func:"):
        nbrmm.register_reinitialize_hook(5)
    with pytest.raises(TypeError, match="^name:"):
        nbrmm.statistics.profiler(name=5)
    with pytest.raises(ValueError, match="^ordered_by:"):
        nbrmm.statistics.ProfilerRecords().report(ordered_by="bogus")
    with pytest.raises(TypeError, match="abstract"):
        mr.DeviceMemoryResource()
    with pytest.raises(TypeError, match="^UpstreamResourceAdaptor is the base class"):
        mr.UpstreamResourceAdaptor(r)


def test_difference_device_ids_checked():
    count = nbrmm.get_device_count()
    with pytest.raises(ValueError, match="^device: device -2 does not exist"):
        mr.get_per_device_resource(-2)  # rmm: a new CudaMemoryResource
    # Without a GPU no device number is right: that is what nbrmm says.
    with pytest.raises(ValueError if count else nbrmm.CudaUnavailableError, match="^device: device"):
        mr.get_per_device_resource(count)


def test_difference_per_device_map():
    from extensions import cpp_ext

    mine = HostHeap().resource()
    mr.set_current_device_resource(mine)
    cpp_ext.set_current_owned(False)  # C++ sets the current resource
    current = mr.get_current_device_resource()
    assert current is not mine  # rmm would still answer `mine`
    assert isinstance(current, mr.StatisticsResourceAdaptor)
    before = cpp_ext.owned_counts()[0]
    buf = nbrmm.DeviceBuffer(size=64)  # allocated from what C++ set
    assert cpp_ext.owned_counts()[0] == before + 64
    del buf
    cpp_ext.reset_current()


def test_difference_is_initialized():
    out = run_python(
        """
        import nbrmm, nbrmm.mr
        before = (nbrmm.is_initialized(), nbrmm.mr.is_initialized())
        r = nbrmm.mr.CallbackMemoryResource(lambda n, s: 0, lambda p, n, s: None)
        nbrmm.mr.set_current_device_resource(r)
        print(before, (nbrmm.is_initialized(), nbrmm.mr.is_initialized()))
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "(False, False) (True, True)"  # rmm: always True


def test_difference_reinitialize_checks_first():
    calls = []
    nbrmm.register_reinitialize_hook(calls.append, "hook")
    try:
        if nbrmm.get_device_count() > 0:
            with pytest.raises(nbrmm.InvalidArgumentError, match="^devices:"):
                nbrmm.reinitialize(devices=[nbrmm.get_device_count()])
        else:  # what is missing is a GPU, not a device number
            with pytest.raises(nbrmm.CudaUnavailableError, match=r"^reinitialize\(\) needs a GPU"):
                nbrmm.reinitialize()
        with pytest.raises(ValueError, match="Could not parse"):
            nbrmm.reinitialize(pool_allocator=True, initial_pool_size="2k")
        assert calls == []  # rmm: the hook has run twice
    finally:
        nbrmm.unregister_reinitialize_hook(calls.append)


def test_difference_numba_hook_imports():
    out = run_python(
        """
        import sys
        sys.modules["numba"] = None
        import nbrmm.allocators.numba as hook  # rmm: ModuleNotFoundError here
        try:
            hook.RMMNumbaManager()
        except ModuleNotFoundError as e:
            print(e.name)
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "numba"


@pytest.mark.gpu
def test_difference_pointer_contract():
    freed = []
    for bad in (0x1001, 0):
        res = mr.CallbackMemoryResource(lambda n, s, p=bad: p, lambda p, n, s: freed.append(p))
        with pytest.raises(nbrmm.InvalidArgumentError) as info:  # rmm: no error at all
            nbrmm.Buffer(64, mr=res)
        assert isinstance(info.value, RuntimeError) and "allocate_func returned" in str(info.value)
    assert freed == [0x1001]  # the misaligned block went back


def test_difference_raw_deallocate_checked():
    heap = HostHeap()
    res = heap.resource()
    ptr = res.allocate(64)
    with pytest.raises(ValueError, match="nbytes"):
        res.deallocate(ptr, 65)
    res.deallocate(ptr, 64)
    with pytest.raises(ValueError, match="already freed"):
        res.deallocate(ptr, 64)  # rmm: a double free inside the resource
    with pytest.raises(ValueError, match="another resource"):
        heap.resource().deallocate(res.allocate(8), 8)
    assert heap.bytes_in_use == 8  # only the allocation another resource refused to free


def test_difference_reentrant_callbacks():
    heap = HostHeap()
    box = {}

    def alloc(n, s):
        nbrmm.Buffer(16, mr=box["pool"])  # rmm: deadlocks on the pool's lock
        return heap.allocate(n, s)

    box["pool"] = mr.PoolMemoryResource(mr.CallbackMemoryResource(alloc, heap.deallocate), 0)
    with pytest.raises(RuntimeError, match="inside a Python callback"):
        nbrmm.Buffer(64, mr=box["pool"])


@pytest.mark.gpu
def test_difference_numba_memory_info():
    pytest.importorskip("numba.cuda")
    out = run_python(
        """
        from numba import cuda
        from nbrmm.allocators.numba import RMMNumbaManager
        cuda.set_memory_manager(RMMNumbaManager)
        free, total = cuda.current_context().get_memory_info()  # rmm: NotImplementedError
        print(0 < free <= total)
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


def test_difference_statistics_context_value():
    heap = HostHeap()
    mr.set_current_device_resource(heap.resource())
    with nbrmm.statistics.statistics() as stats:  # rmm: None
        assert isinstance(stats, mr.StatisticsResourceAdaptor)
        buf = nbrmm.DeviceBuffer(size=100)
        assert stats.allocation_counts.current_bytes == 100
        del buf


def test_difference_pickles():
    heap = HostHeap()
    mr.set_current_device_resource(heap.resource())
    empty = nbrmm.DeviceBuffer(size=0)
    data = pickle.dumps(empty, protocol=5)
    assert b"nbrmm" in data and b"rmm.pylibrmm" not in data
    back = pickle.loads(data)
    assert type(back) is nbrmm.DeviceBuffer and back.size == 0
    assert back.mr is mr.get_current_device_resource()  # unpickled on the current resource
    if HAVE_GPU:
        full = nbrmm.DeviceBuffer.to_device(b"payload", mr=mr.CudaMemoryResource())
        buffers = []
        data = pickle.dumps(full, protocol=5, buffer_callback=buffers.append)
        assert len(buffers) == 1 and bytes(buffers[0].raw()) == b"payload"
        target = mr.CudaMemoryResource()
        again = nbrmm.loads(data, mr=target, buffers=buffers)
        assert again.tobytes() == b"payload" and again.mr is target


@pytest.mark.gpu
def test_difference_async_view_handles():
    pool_owner = mr.CudaAsyncMemoryResource()
    by_int = mr.CudaAsyncViewMemoryResource(pool_owner.pool_handle())  # rmm: ValueError
    by_object = mr.CudaAsyncViewMemoryResource(pool_owner)
    assert by_int.pool_handle() == by_object.pool_handle() == pool_owner.pool_handle()
    buf = nbrmm.DeviceBuffer.to_device(b"shared pool", mr=by_object)
    assert buf.tobytes() == b"shared pool"


# --------------------------------------------------------------------------------------
# Rule 6: unchanged rmm programs through nbrmm.compat
# --------------------------------------------------------------------------------------


def _compat(*args, cwd=None, env=None):
    return subprocess.run(
        [sys.executable, "-m", "nbrmm.compat", *args],
        capture_output=True, text=True, timeout=300, cwd=cwd, env=env,
    )


def test_compat_runs_an_rmm_program_on_host_memory():
    out = _compat(str(PROGRAMS / "host_memory.py"), "first", "--second")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "nbrmm ['first', '--second'] ok"


@pytest.mark.gpu
def test_compat_runs_an_rmm_program_on_the_gpu():
    out = _compat(str(PROGRAMS / "device_memory.py"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "ok"


def test_compat_runs_modules_and_code(tmp_path):
    (tmp_path / "uses_rmm.py").write_text(
        "import sys\nimport rmm.pylibrmm.stream as s\nimport rmm\n"
        "print(rmm.__name__, s.__name__, s.Stream is rmm.pylibrmm.stream.Stream, sys.argv[1:])\n"
    )
    out = _compat("-m", "uses_rmm", "x", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "nbrmm nbrmm.pylibrmm.stream True ['x']"
    out = _compat("-c", "import rmm, sys; print(rmm.DeviceBuffer.__module__, sys.argv)", "y")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "nbrmm ['-c', 'y']"


def test_compat_program_errors_propagate(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text("import rmm\nimport sys\nsys.exit(3)\n")
    assert _compat(str(script)).returncode == 3
    script.write_text("import rmm._cuda.gpu\n")  # rmm's private modules are not provided
    out = _compat(str(script))
    assert out.returncode == 1
    assert "ModuleNotFoundError: No module named 'rmm._cuda'" in out.stderr
    usage = _compat()
    assert usage.returncode == 2 and "usage:" in usage.stderr


def _startup_file_is_read():
    """Whether Python reads nbrmm-compat.pth at startup: only .pth files in a site
    directory are (not in a ``pip install --target`` directory on PYTHONPATH)."""
    import site

    dirs = [*site.getsitepackages(), site.getusersitepackages()]
    return any(pathlib.Path(d, "nbrmm-compat.pth").is_file() for d in dirs)


needs_startup_file = pytest.mark.skipif(
    not _startup_file_is_read(),
    reason="nbrmm is not installed in a site directory: Python does not read nbrmm-compat.pth",
)


@needs_startup_file
def test_compat_maps_rmm_in_the_processes_a_program_starts(tmp_path):
    script = tmp_path / "starts_processes.py"
    script.write_text(
        "import multiprocessing as mp, os, subprocess, sys\n"
        "import rmm\n"
        "def child(queue):\n"
        "    import rmm.pylibrmm.stream\n"
        "    queue.put((rmm.__name__, rmm.pylibrmm.stream.__name__))\n"
        "if __name__ == '__main__':\n"
        "    ctx = mp.get_context('spawn')\n"
        "    queue = ctx.Queue()\n"
        "    proc = ctx.Process(target=child, args=(queue,))\n"
        "    proc.start()\n"
        "    print(*queue.get(timeout=120), proc.join(120) or proc.exitcode)\n"
        "    out = subprocess.run([sys.executable, '-c', 'import rmm; print(rmm.__name__)'],\n"
        "                         capture_output=True, text=True)\n"
        "    print(out.stdout.strip(), os.environ.get('NBRMM_COMPAT'))\n"
    )
    out = _compat(str(script))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["nbrmm", "nbrmm.pylibrmm.stream", "0", "nbrmm", "1"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, "False"), pytest.param("1", "True", marks=needs_startup_file), ("0", "False")],
)
def test_the_environment_variable_maps_rmm_at_startup(value, expected):
    env = {k: v for k, v in os.environ.items() if k != "NBRMM_COMPAT"}
    if value is not None:
        env["NBRMM_COMPAT"] = value
    out = subprocess.run(
        [sys.executable, "-c", "import sys; m = sys.modules.get('nbrmm.compat'); "
         "print(m is not None and m.installed())"],
        capture_output=True, text=True, timeout=300, env=env,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == expected and out.stderr == ""


def test_aliased_modules_keep_their_own_spec():
    out = run_python(
        """
        import importlib, importlib.resources, importlib.util, sys
        import nbrmm, nbrmm.compat
        nbrmm.compat.install()
        import rmm, rmm.mr, rmm.pylibrmm.stream
        print(nbrmm.__spec__.name, nbrmm.mr.__spec__.name,
              nbrmm.pylibrmm.stream.__spec__.name,
              "GIT_COMMIT" in [p.name for p in importlib.resources.files("nbrmm").iterdir()])
        importlib.reload(rmm)  # reloads nbrmm, under its own name
        print(nbrmm.__name__, sys.modules["nbrmm"] is nbrmm, sys.modules["rmm"] is nbrmm)
        nbrmm.compat.uninstall()
        print(importlib.util.find_spec("nbrmm").name,
              sorted(n for n in sys.modules if n == "rmm" or n.startswith("rmm.")))
        importlib.reload(nbrmm)
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:3] == [
        "nbrmm nbrmm.mr nbrmm.pylibrmm.stream True",
        "nbrmm True True",
        "nbrmm []",
    ]


def _fake_rmm(tmp_path):
    pkg = tmp_path / "rmm"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("REAL = True\n")
    return tmp_path


def test_compat_refuses_when_the_real_rmm_is_imported(tmp_path):
    site = _fake_rmm(tmp_path)
    out = run_python(
        f"""
        import sys
        sys.path.insert(0, {str(site)!r})
        import rmm
        import nbrmm.compat
        try:
            nbrmm.compat.install()
        except ImportError as e:
            print(type(e).__name__, "|", e)
        print(nbrmm.compat.installed(), getattr(sys.modules["rmm"], "REAL", False))
        """
    )
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.strip().splitlines()
    assert first.startswith("RmmAlreadyImportedError | the real rmm is already imported")
    assert str(site) in first
    assert second == "False True"  # nothing changed


def test_compat_shadows_an_installed_rmm(tmp_path):
    site = _fake_rmm(tmp_path)
    out = run_python(
        f"""
        import sys
        sys.path.insert(0, {str(site)!r})
        import nbrmm, nbrmm.compat
        nbrmm.compat.install()
        nbrmm.compat.install()  # again: nothing more happens
        import rmm, rmm.mr
        from rmm.pylibrmm.memory_resource import experimental
        print(rmm is nbrmm, rmm.mr is nbrmm.mr,
              experimental is nbrmm.pylibrmm.memory_resource.experimental,
              hasattr(rmm, "REAL"))
        nbrmm.compat.uninstall()
        print(nbrmm.compat.installed(), "rmm" in sys.modules, "rmm.mr" in sys.modules)
        import rmm
        print(getattr(rmm, "REAL", False))
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True"] * 3 + ["False", "False", "False", "False", "True"]
