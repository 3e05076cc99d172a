"""nbrmm.Stream: constants, the __cuda_stream__ protocol, and bad arguments."""

import gc
import re
import weakref

import pytest

import nbrmm
from helpers import HostHeap


class ForeignStream:
    """A third-party stream object implementing the protocol."""

    def __init__(self, handle):
        self.handle_value = handle

    def __cuda_stream__(self):
        return (0, self.handle_value)


def test_constants():
    assert nbrmm.DEFAULT_STREAM.handle == 0
    assert nbrmm.LEGACY_DEFAULT_STREAM.handle == 1
    assert nbrmm.PER_THREAD_DEFAULT_STREAM.handle == 2
    assert nbrmm.DEFAULT_STREAM.is_default()
    assert nbrmm.LEGACY_DEFAULT_STREAM.is_default()
    assert not nbrmm.PER_THREAD_DEFAULT_STREAM.is_default()
    assert nbrmm.PER_THREAD_DEFAULT_STREAM.is_per_thread_default()
    assert nbrmm.DEFAULT_STREAM.__cuda_stream__() == (0, 0)


def test_wraps_protocol_objects_and_keeps_them_alive():
    foreign = ForeignStream(0x1234)
    ref = weakref.ref(foreign)
    s = nbrmm.Stream(foreign)
    assert s.handle == 0x1234
    assert s.__cuda_stream__() == (0, 0x1234)
    assert s.owner is foreign
    assert not s.is_default()
    del foreign
    gc.collect()
    assert ref() is not None
    del s
    gc.collect()
    assert ref() is None


def test_wrapping_a_stream_shares_handle_and_equality():
    a = nbrmm.Stream(ForeignStream(77))
    b = nbrmm.Stream(a)
    assert a == b and hash(a) == hash(b)
    assert a != nbrmm.DEFAULT_STREAM
    assert len({a, b, nbrmm.DEFAULT_STREAM}) == 2


@pytest.mark.parametrize("bad", [None, 3, "stream", object(), 1.5])
def test_bad_stream_arguments_raise_type_error_naming_the_parameter(bad):
    heap = HostHeap()
    mr = heap.resource()
    with pytest.raises(TypeError, match="stream"):
        nbrmm.Buffer(16, mr=mr, stream=bad)
    with pytest.raises(TypeError, match="stream"):
        mr.allocate(16, bad)
    assert heap.bytes_in_use == 0
    if bad is not None:
        with pytest.raises(TypeError):
            nbrmm.Stream(bad)


def test_protocol_returning_garbage_is_rejected():
    class Broken:
        def __cuda_stream__(self):
            return "nope"

    with pytest.raises(TypeError, match="__cuda_stream__"):
        nbrmm.Stream(Broken())


class HandleAttribute:
    """A stream object of the older spellings: the handle in an attribute."""

    def __init__(self, name, value):
        setattr(self, name, value)


OUT_OF_RANGE = [-1, -(2**63), 2**64, 2**70]
SPELLINGS = [
    (ForeignStream, "__cuda_stream__()"),
    (lambda h: HandleAttribute("ptr", h), ".ptr"),
    (lambda h: HandleAttribute("cuda_stream", h), ".cuda_stream"),
    (lambda h: HandleAttribute("handle", h), ".handle"),
]


@pytest.mark.parametrize("handle", OUT_OF_RANGE)
@pytest.mark.parametrize("make, source", SPELLINGS, ids=[s for _, s in SPELLINGS])
def test_a_handle_out_of_range_is_an_overflow_error_naming_the_parameter(make, source, handle):
    heap = HostHeap()
    mr = heap.resource()
    # rmm's conversion to a C handle raises OverflowError; nbrmm's ArgumentRangeError is one
    # (and a ValueError), and names the parameter and where the handle came from.
    text = f"the stream handle from {re.escape(source)} is {handle}; "
    with pytest.raises(OverflowError, match=f"^obj: {text}") as info:
        nbrmm.Stream(make(handle))
    assert isinstance(info.value, (ValueError, nbrmm.ArgumentRangeError))
    with pytest.raises(nbrmm.ArgumentRangeError, match=f"^stream: {text}"):
        nbrmm.Buffer(16, mr=mr, stream=make(handle))
    with pytest.raises(nbrmm.ArgumentRangeError, match=f"^stream: {text}"):
        mr.allocate(16, make(handle))
    assert heap.bytes_in_use == 0


def test_the_largest_handles_are_accepted():
    for handle in (0, 2**63, 2**64 - 1):
        assert nbrmm.Stream(ForeignStream(handle)).handle == handle
        assert nbrmm.Stream(HandleAttribute("ptr", handle)).handle == handle


class FailingAttribute:
    """A stream object whose attribute ``name`` raises when read (a destroyed stream)."""

    def __init__(self, name):
        self.name = name

    def __getattr__(self, attr):
        if attr == self.name:
            raise RuntimeError(f"{attr} of a destroyed stream")
        raise AttributeError(attr)


@pytest.mark.parametrize("name", ["__cuda_stream__", "ptr", "cuda_stream", "handle"])
def test_an_attribute_that_fails_is_not_a_missing_one(name):
    """As Python's hasattr decides: only AttributeError means the object has no such
    attribute; another error from its getter reaches the caller, and nothing is made."""
    heap = HostHeap()
    mr = heap.resource()
    with pytest.raises(RuntimeError, match=f"^{name} of a destroyed stream$"):
        nbrmm.Stream(FailingAttribute(name))
    with pytest.raises(RuntimeError, match=f"^{name} of a destroyed stream$"):
        nbrmm.Buffer(16, mr=mr, stream=FailingAttribute(name))
    with pytest.raises(RuntimeError, match=f"^{name} of a destroyed stream$"):
        mr.allocate(16, FailingAttribute(name))
    assert heap.bytes_in_use == 0


def test_an_object_without_any_spelling_is_no_stream():
    with pytest.raises(TypeError, match="^obj: expected an nbrmm.Stream or an object "
                                        "implementing __cuda_stream__"):
        nbrmm.Stream(FailingAttribute("unrelated"))


def test_flags_only_for_new_streams():
    with pytest.raises(ValueError, match="flags may only be specified when obj is None"):
        nbrmm.Stream(ForeignStream(5), flags=nbrmm.CudaStreamFlags.NON_BLOCKING)


def test_stream_protocol_values_are_ints_not_bools():
    """A bool is no stream handle (True would be the legacy default stream); a version
    that is an int subclass equal to 0 (an IntEnum) is version 0."""
    import enum

    class Version(enum.IntEnum):
        ZERO = 0

    def stream_like(protocol):
        return type("S", (), {"__cuda_stream__": lambda self: protocol})()

    with pytest.raises(TypeError, match=r"^obj: the stream handle from __cuda_stream__\(\) must "
                                        "be an int, got bool$"):
        nbrmm.Stream(stream_like((0, True)))
    with pytest.raises(TypeError, match="^obj: the stream handle from .ptr must be an int"):
        nbrmm.Stream(type("P", (), {"ptr": True})())
    with pytest.raises(NotImplementedError, match="returned version False"):
        nbrmm.Stream(stream_like((False, 5)))
    assert nbrmm.Stream(stream_like((Version.ZERO, 5))).handle == 5


def test_stream_conversions_name_their_own_parameter():
    """Where nbrmm makes a Stream for another parameter, the errors name that parameter,
    also when the object answers otherwise the second time it is asked; an error the
    object raises itself goes on as it is."""
    pytest.importorskip("cuda.core")
    from nbrmm.interop import from_cuda_core_stream

    class Fickle:
        calls = 0

        def __cuda_stream__(self):
            Fickle.calls += 1
            return (0, 5) if Fickle.calls == 1 else (0, -7)

    with pytest.raises(ValueError, match="^stream: the stream handle from __cuda_stream__"):
        from_cuda_core_stream(Fickle())

    class OwnError(ValueError):
        def __init__(self, a, b):
            super().__init__(a)

    class Raising:
        def __cuda_stream__(self):
            raise OwnError("its own", "words")

    with pytest.raises(OwnError, match="^its own$"):
        from_cuda_core_stream(Raising())


def test_foreign_stream_accepted_directly_by_allocating_calls():
    heap = HostHeap()
    mr = heap.resource()
    seen = []
    orig = heap.allocate

    def allocate(n, stream):
        seen.append(stream.handle)
        return orig(n, stream)

    heap.allocate = allocate
    mr = nbrmm.mr.CallbackMemoryResource(heap.allocate, heap.deallocate)
    buf = nbrmm.Buffer(32, mr=mr, stream=ForeignStream(0x42))
    assert seen == [0x42]
    assert buf.stream.handle == 0x42
    del buf


@pytest.mark.gpu
def test_owned_stream_lifecycle():
    s = nbrmm.Stream()
    assert s.handle not in (0, 1, 2)
    s.synchronize()
    nb = nbrmm.Stream(flags=nbrmm.CudaStreamFlags.NON_BLOCKING)
    assert nb != s
    view = nbrmm.Stream(s)
    del s
    gc.collect()
    view.synchronize()  # the owned stream lives as long as any Stream using it


@pytest.mark.gpu
def test_stream_pool_cycles_and_keeps_pool_alive():
    pool = nbrmm.CudaStreamPool(pool_size=3)
    assert pool.get_pool_size() == 3
    handles = [pool.get_stream().handle for _ in range(6)]
    assert handles[:3] == handles[3:]
    assert len(set(handles[:3])) == 3
    assert pool.get_stream(1).handle == handles[1] or pool.get_stream(1).handle in handles
    assert pool.get_stream(3).handle == pool.get_stream(0).handle  # wraps, as in librmm
    with pytest.raises(nbrmm.ArgumentRangeError, match="stream_id"):
        pool.get_stream(-1)
    s = pool.get_stream(0)
    ref = weakref.ref(pool)
    del pool
    gc.collect()
    assert ref() is not None
    s.synchronize()
    del s
    gc.collect()
    assert ref() is None


def test_stream_pool_rejects_empty():
    with pytest.raises(ValueError, match="pool_size"):
        nbrmm.CudaStreamPool(pool_size=0)


def test_default_stream_weakref_callback_cannot_be_misused():
    """nbrmm forgets DEFAULT_STREAM through a weak reference's callback once it is gone;
    called by hand, with anything, the callback changes nothing."""
    (ref,) = [r for r in weakref.getweakrefs(nbrmm.DEFAULT_STREAM) if r.__callback__]
    for arg in (None, ref, 0, weakref.ref(HostHeap)):
        ref.__callback__(arg)
    heap = HostHeap()
    buf = nbrmm.Buffer(16, mr=nbrmm.mr.CallbackMemoryResource(heap.allocate, heap.deallocate))
    assert buf.stream is nbrmm.DEFAULT_STREAM
