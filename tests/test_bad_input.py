"""A table of bad inputs over the public API: each raises the documented exception with a
message naming the problem, and leaves nothing allocated (a TrackingResourceAdaptor and the
host heap underneath both read zero afterwards)."""

import pytest

import nbrmm
import nbrmm.mr as mr
import nbrmm.statistics
from helpers import HostHeap

HUGE = 2**64
NO_DEVICE = 4096
BAD_DEVICE = -2
# A device number that does not exist; without a GPU, no device number is right and that
# is what nbrmm says.
NO_DEVICE_ERROR = ValueError if nbrmm.get_device_count() > 0 else nbrmm.CudaUnavailableError


class Foreign:
    """Not a stream, not a resource, not an array."""


def closed_buffer(res):
    buf = nbrmm.Buffer(8, mr=res)
    buf.close()
    return buf


# (id, call(res) -> None, exception, message pattern)
CASES = [
    ("Buffer-negative", lambda r: nbrmm.Buffer(-1, mr=r), ValueError, "nbytes"),
    ("Buffer-huge", lambda r: nbrmm.Buffer(HUGE, mr=r), ValueError, "nbytes"),
    ("Buffer-float", lambda r: nbrmm.Buffer(1.5, mr=r), TypeError, "nbytes"),
    ("Buffer-None-size", lambda r: nbrmm.Buffer(None, mr=r), TypeError, "nbytes"),
    ("Buffer-bad-unit", lambda r: nbrmm.Buffer("3 parsecs", mr=r), ValueError, "nbytes"),
    ("Buffer-mr-str", lambda r: nbrmm.Buffer(8, mr="pool"), TypeError, "mr"),
    ("Buffer-stream-None", lambda r: nbrmm.Buffer(8, mr=r, stream=None), TypeError, "stream"),
    ("Buffer-stream-int", lambda r: nbrmm.Buffer(8, mr=r, stream=0), TypeError, "stream"),
    ("Buffer-stream-foreign", lambda r: nbrmm.Buffer(8, mr=r, stream=Foreign()), TypeError,
     "stream"),
    ("DeviceBuffer-size", lambda r: nbrmm.DeviceBuffer(size=-3, mr=r), ValueError, "size"),
    ("DeviceBuffer-positional", lambda r: nbrmm.DeviceBuffer(8), TypeError,
     r"^DeviceBuffer\(\): takes no positional arguments"),
    ("to_device-not-bytes", lambda r: nbrmm.to_device(Foreign(), mr=r), TypeError, "b"),
    ("to_device-mr", lambda r: nbrmm.to_device(b"x", mr=3), TypeError, "mr"),
    ("closed-ptr", lambda r: closed_buffer(r).ptr, ValueError, "closed"),
    ("closed-copy", lambda r: closed_buffer(r).copy(), ValueError, "closed"),
    ("closed-resize", lambda r: closed_buffer(r).resize(4), ValueError, "closed"),
    ("closed-tobytes", lambda r: closed_buffer(r).tobytes(), ValueError, "closed"),
    ("closed-dlpack", lambda r: closed_buffer(r).__dlpack__(), ValueError, "closed"),
    ("closed-with", lambda r: closed_buffer(r).__enter__(), ValueError,
     "^__enter__: the buffer is closed$"),
    ("resize-negative", lambda r: nbrmm.Buffer(8, mr=r).resize(-1), ValueError, "new_size"),
    ("reserve-type", lambda r: nbrmm.Buffer(8, mr=r).reserve("x"), ValueError, "new_capacity"),
    ("copy-mr", lambda r: nbrmm.Buffer(8, mr=r).copy(mr=1), TypeError, "mr"),
    ("copy_from_host-type", lambda r: nbrmm.Buffer(8, mr=r).copy_from_host(7), TypeError, "ary"),
    ("copy_from_host-too-big", lambda r: nbrmm.Buffer(2, mr=r).copy_from_host(b"abc"),
     ValueError, "ary"),
    ("copy_to_host-too-small", lambda r: nbrmm.Buffer(8, mr=r).copy_to_host(bytearray(2)),
     ValueError, "ary"),
    ("copy_to_host-readonly", lambda r: nbrmm.Buffer(8, mr=r).copy_to_host(b"12345678"),
     BufferError, "writable"),
    ("copy_from_device-host", lambda r: nbrmm.Buffer(8, mr=r).copy_from_device(b"x"),
     ValueError, "cuda_ary"),
    ("allocate-negative", lambda r: r.allocate(-1), ValueError, "nbytes"),
    ("allocate-stream", lambda r: r.allocate(8, "s"), TypeError, "stream"),
    ("deallocate-size", lambda r: r.deallocate(0, -1), ValueError, "nbytes"),
    ("set_current-type", lambda r: mr.set_current_device_resource(object()), TypeError, "mr"),
    ("set_per_device-device", lambda r: mr.set_per_device_resource(BAD_DEVICE, r), ValueError,
     "^device: device -2 does not exist"),
    ("get_per_device-device", lambda r: mr.get_per_device_resource(BAD_DEVICE), ValueError,
     "^device: device -2 does not exist"),
    ("reset_per_device-device", lambda r: mr.reset_per_device_resource(BAD_DEVICE), ValueError,
     "^device: device -2 does not exist"),
    ("set_device", lambda r: nbrmm.set_current_device(BAD_DEVICE), ValueError,
     "^device: device -2 does not exist"),
    ("available_memory-device", lambda r: nbrmm.available_device_memory(BAD_DEVICE), ValueError,
     "^device: device -2 does not exist"),
    ("set_per_device-no-device", lambda r: mr.set_per_device_resource(NO_DEVICE, r),
     NO_DEVICE_ERROR, "^device: device 4096 "),
    ("set_device-no-device", lambda r: nbrmm.set_current_device(NO_DEVICE), NO_DEVICE_ERROR,
     "^device: device 4096 "),
    ("set_device-huge", lambda r: nbrmm.set_current_device(HUGE), nbrmm.ArgumentRangeError,
     "^device: "),
    ("set_device-str", lambda r: nbrmm.set_current_device("0"), TypeError,
     "^device: expected an int, got str"),
    ("Stream-foreign", lambda r: nbrmm.Stream(Foreign()), TypeError, "obj"),
    ("StreamPool-size", lambda r: nbrmm.CudaStreamPool(pool_size=0), ValueError, "pool_size"),
    ("Callback-not-callable", lambda r: mr.CallbackMemoryResource(1, 2), TypeError,
     "allocate_func"),
    ("Pool-upstream", lambda r: mr.PoolMemoryResource("cuda"), TypeError, "upstream_mr"),
    ("Pool-max-below-initial", lambda r: mr.PoolMemoryResource(r, 1 << 20, 1 << 10),
     nbrmm.InvalidArgumentError, "exceeds the maximum pool size"),
    ("Pool-negative", lambda r: mr.PoolMemoryResource(r, -1), ValueError, "initial_pool_size"),
    ("Limiting-limit", lambda r: mr.LimitingResourceAdaptor(r, -5), ValueError,
     "allocation_limit"),
    ("FailureCallback-callable", lambda r: mr.FailureCallbackResourceAdaptor(r, 5), TypeError,
     "callback"),
    ("Aligned-not-power-of-two", lambda r: mr.AlignedResourceAdaptor(r, 3), ValueError,
     "alignment"),
    ("Statistics-upstream", lambda r: mr.StatisticsResourceAdaptor(None), TypeError,
     "upstream_mr"),
    ("Binning-upstream", lambda r: mr.BinningMemoryResource(3), TypeError, "upstream_mr"),
    ("enable_statistics-mr", lambda r: nbrmm.statistics.enable_statistics(mr="x"), TypeError,
     "mr"),
    ("reinitialize-devices", lambda r: nbrmm.reinitialize(devices=[NO_DEVICE]),
     NO_DEVICE_ERROR, "does not exist" if NO_DEVICE_ERROR is ValueError else "needs a GPU"),
    ("hook-not-callable", lambda r: nbrmm.register_reinitialize_hook(None), TypeError, "func"),
    ("unpickling_resource-type", lambda r: nbrmm.loads(b"", mr=1), TypeError, "mr"),
]


@pytest.mark.parametrize(("call", "exc", "pattern"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_bad_input_raises_and_leaks_nothing(call, exc, pattern):
    heap = HostHeap()
    tracked = mr.TrackingResourceAdaptor(heap.resource())
    nbrmm.mr.set_current_device_resource(tracked)
    with pytest.raises(exc, match=pattern):
        call(tracked)
    assert tracked.get_allocated_bytes() == 0
    assert heap.bytes_in_use == 0


def test_the_matrix_covers_the_public_api():
    assert len(CASES) >= 45


class FakeArray:
    """An object whose ``__cuda_array_interface__`` is what the test says."""

    def __init__(self, interface):
        self.__cuda_array_interface__ = interface


def _interface(**entries):
    return {"shape": (4,), "typestr": "|u1", "data": (0, False), "version": 3, **entries}


# (id, interface, exception, message): what another library's malformed interface gives.
BAD_INTERFACES = [
    ("not-a-dict", [1, 2], TypeError, "cuda_ary: __cuda_array_interface__ must be a dict, got list"),
    ("no-shape", {"typestr": "|u1", "data": (0, False)}, KeyError,
     "cuda_ary: __cuda_array_interface__ has no 'shape'"),
    ("shape-negative", _interface(shape=(-1,)), ValueError,
     "cuda_ary: __cuda_array_interface__['shape'] holds -1; expected an int from 0 to 2**64 - 1"),
    ("shape-huge", _interface(shape=(HUGE,)), OverflowError,
     f"cuda_ary: __cuda_array_interface__['shape'] holds {HUGE}; expected an int from 0 to "
     "2**64 - 1"),
    ("shape-str", _interface(shape=("a",)), TypeError,
     "cuda_ary: an int is expected in __cuda_array_interface__['shape'], got str"),
    ("shape-int", _interface(shape=4), TypeError,
     "cuda_ary: __cuda_array_interface__['shape'] must be a tuple, got int"),
    ("typestr-int", _interface(typestr=5), TypeError,
     "cuda_ary: __cuda_array_interface__['typestr'] must be a str, got int"),
    ("data-empty", _interface(data=()), IndexError,
     "cuda_ary: __cuda_array_interface__['data'] must be a (pointer, read-only) tuple"),
    ("data-negative", _interface(data=(-5, False)), OverflowError,
     "cuda_ary: __cuda_array_interface__['data'] holds -5; expected an int from 0 to 2**64 - 1"),
    ("data-None", _interface(data=(None, False)), TypeError,
     "cuda_ary: an int is expected in __cuda_array_interface__['data'], got None"),
    ("strides-short", _interface(shape=(4, 4), strides=(4,)), ValueError,
     "cuda_ary: __cuda_array_interface__['strides'] has 1 entries for 2 dimensions"),
    ("strides-str", _interface(strides="ab"), TypeError,
     "cuda_ary: __cuda_array_interface__['strides'] must be a tuple, got str"),
    ("stream-str", _interface(stream="x"), TypeError,
     "cuda_ary: an int is expected in __cuda_array_interface__['stream'], got str"),
]


@pytest.mark.parametrize(("interface", "exc", "message"), [c[1:] for c in BAD_INTERFACES],
                         ids=[c[0] for c in BAD_INTERFACES])
def test_a_malformed_cuda_array_interface_is_named(interface, exc, message):
    """Another library's malformed ``__cuda_array_interface__`` (an empty ``data`` tuple
    crashed the interpreter; the others raised ``RuntimeError: std::bad_cast``)."""
    buf = nbrmm.Buffer(16, mr=HostHeap().resource())
    with pytest.raises(exc) as info:
        buf.copy_from_device(FakeArray(interface))
    text = info.value.args[0] if exc is KeyError else str(info.value)
    assert text == message
    buf.close()  # nothing of the buffer stayed in use


def test_an_interface_property_that_fails_is_not_a_missing_one():
    """As Python's hasattr (and so rmm) decides: the error a failing
    ``__cuda_array_interface__`` raises reaches the caller; only a missing one is
    nbrmm's ValueError."""

    class Failing:
        @property
        def __cuda_array_interface__(self):
            raise RuntimeError("the array was freed")

    buf = nbrmm.Buffer(16, mr=HostHeap().resource())
    with pytest.raises(RuntimeError, match="^the array was freed$"):
        buf.copy_from_device(Failing())
    with pytest.raises(ValueError, match="^cuda_ary: expected an object with "
                                         "__cuda_array_interface__, got object$"):
        buf.copy_from_device(object())
    buf.close()


def test_an_interface_whose_entries_empty_it_is_read_safely():
    """An entry's own code (a tuple subclass's ``__iter__``) that empties the dict, or
    raises, while nbrmm reads it."""
    state = {}

    class Emptying(tuple):
        def __iter__(self):
            state["cai"].clear()
            return iter((16,))

    class Raising(tuple):
        def __iter__(self):
            raise RuntimeError("raised by __iter__")

    class Array:
        @property
        def __cuda_array_interface__(self):
            state["cai"] = _interface(shape=state["shape"])
            return state["cai"]

    buf = nbrmm.Buffer(16, mr=HostHeap().resource())
    for _ in range(20):
        state["shape"] = Emptying((16,))
        with pytest.raises(KeyError, match="cuda_ary: __cuda_array_interface__ has no 'typestr'"):
            buf.copy_from_device(Array())
    state["shape"] = Raising((16,))
    with pytest.raises(RuntimeError, match="^raised by __iter__$"):
        buf.copy_from_device(Array())
    buf.close()


def test_a_class_with_a_hostile_members_attribute_is_named():
    """``type_of`` reads ``__members__`` of a class passed where an instance is expected
    (to suggest an enum member): what the class says may be anything."""

    class EmptyIteration(dict):
        def __iter__(self):
            return iter(())

    for members in (EmptyIteration(a=1), 5, [7], None):

        class Odd(nbrmm.Stream):
            __members__ = members

        for call, param in ((lambda: nbrmm.Stream(Odd), "obj"),
                            (lambda: nbrmm.Buffer(8, mr=HostHeap().resource(), stream=Odd),
                             "stream")):
            with pytest.raises(TypeError) as info:
                call()
            name = Odd.__qualname__
            assert str(info.value) == (
                f"{param}: expected an nbrmm.Stream or an object implementing __cuda_stream__, "
                f"got the class {name}; pass an instance, e.g. {name}(...)")


def test_text_that_is_not_valid_utf8_is_named_escaped():
    # Lone surrogates in a size string, in a class's name and in a keyword: nbrmm's own
    # messages, the text escaped (never a C++ conversion error).
    heap = HostHeap()
    with pytest.raises(ValueError, match=r"nbytes: Could not parse '1\\udcffGiB'"):
        nbrmm.Buffer("1\udcffGiB", mr=heap.resource())
    odd = type("Odd", (), {})
    odd.__qualname__ = "Odd\udcff"
    for bad in (odd, odd()):
        with pytest.raises(TypeError) as info:
            mr.StatisticsResourceAdaptor(bad)
        message = str(info.value)
        assert message.startswith("upstream_mr:") and "Odd" in message, message
        assert "basic_string" not in message and "bad_cast" not in message
    with pytest.raises(TypeError) as info:
        nbrmm.Buffer(8, **{"\udcff": 1})
    assert "bad_cast" not in str(info.value) and "\\udcff" in str(info.value)
