"""A state machine that does what an attacker would, in any order: builds adaptor graphs
(bins that may point back at their binning resource included), allocates with any size
and alignment, exports buffers as memoryviews, NumPy arrays and DLPack tensors, writes
through the exports, closes, resizes and drops buffers and exports.

After every step it checks the model: no two live buffers share a byte, every export
still shows what was written through it, every pointer honours its alignment, and the
host heap holds exactly the live buffers' memory (plus what pools keep)."""

import gc

import hypothesis.strategies as st
import numpy as np
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import nbrmm
import nbrmm.mr as mr
from extensions import testing
from helpers import HostHeap

host_heap = testing.host_heap_resource

EXPORTERS = {
    "memoryview": memoryview,
    "frombuffer": lambda b: np.frombuffer(b, dtype=np.uint8),
    "dlpack": np.from_dlpack,
}


def depends(res, target):
    """Whether `res` is `target` or reaches it through upstreams and bins (public API)."""
    seen, todo = set(), [res]
    while todo:
        r = todo.pop()
        if r is target:
            return True
        if id(r) in seen:
            continue
        seen.add(id(r))
        todo.extend(x for x in [getattr(r, "upstream_mr", None)] if x is not None)
        todo.extend(getattr(r, "bin_mrs", []))
    return False


class SafetyMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.heap = HostHeap()
        # Host-accessible (exportable) C++ heap, and a Python heap whose bytes are counted.
        self.resources = [host_heap(), self.heap.resource()]
        self.binnings = []
        self.buffers = []  # [buffer, alignment]
        self.exports = []  # [export, owner buffer, expected bytes]

    def teardown(self):
        self.exports.clear()
        gc.collect()
        while self.buffers:
            # A closed buffer still names (and keeps) its resource: drop each one.
            self.buffers.pop()[0].close()
        self.resources.clear()
        self.binnings.clear()
        gc.collect()
        assert self.heap.bytes_in_use == 0

    # -- resource graphs ---------------------------------------------------------------
    @rule(data=st.data(), kind=st.sampled_from(["statistics", "limiting", "tracking", "pool",
                                                 "aligned", "thread_safe", "binning"]))
    def adapt(self, data, kind):
        # Indices, not objects: Hypothesis keeps what it draws until the example ends.
        up = self.resources[data.draw(st.integers(0, len(self.resources) - 1))]
        made = {
            "statistics": lambda: mr.StatisticsResourceAdaptor(up),
            "limiting": lambda: mr.LimitingResourceAdaptor(up, 1 << 22),
            "tracking": lambda: mr.TrackingResourceAdaptor(up),
            "pool": lambda: mr.PoolMemoryResource(up, initial_pool_size=1 << 16),
            "aligned": lambda: mr.AlignedResourceAdaptor(up, 4096, 1024),
            "thread_safe": lambda: mr.ThreadSafeResourceAdaptor(up),
            "binning": lambda: mr.BinningMemoryResource(up),
        }[kind]()
        self.resources.append(made)
        if kind == "binning":
            self.binnings.append(made)

    @precondition(lambda self: self.binnings)
    @rule(data=st.data(), size=st.sampled_from([256, 1024, 4096]))
    def add_bin(self, data, size):
        binning = self.binnings[data.draw(st.integers(0, len(self.binnings) - 1))]
        bin_mr = self.resources[data.draw(st.integers(0, len(self.resources) - 1))]
        cyclic = depends(bin_mr, binning)
        before = list(binning.bin_mrs)
        try:
            binning.add_bin(size, bin_mr)
        except ValueError as e:
            assert "its own upstream" in str(e)
            assert binning.bin_mrs == before
            assert cyclic
        else:
            assert not cyclic

    # -- buffers -----------------------------------------------------------------------
    @rule(data=st.data(), size=st.integers(0, 1 << 14),
          alignment=st.sampled_from([1, 8, 256, 1024, 4096, 1 << 16]))
    def allocate(self, data, size, alignment):
        res = self.resources[data.draw(st.integers(0, len(self.resources) - 1))]
        try:
            buf = nbrmm.Buffer(size, mr=res, alignment=alignment)
        except MemoryError:
            return  # a limit or pool cap: refused cleanly
        assert buf.size == size and buf.alignment == alignment
        if size:
            assert buf.ptr % alignment == 0
        self.buffers.append([buf, alignment])

    @precondition(lambda self: self.buffers)
    @rule(data=st.data(), how=st.sampled_from(sorted(EXPORTERS)))
    def export(self, data, how):
        buf, _ = self.buffers[data.draw(st.integers(0, len(self.buffers) - 1))]
        if not buf.mr.is_host_accessible:
            return
        exp = EXPORTERS[how](buf)
        view = memoryview(exp).cast("B") if how != "memoryview" else exp
        if len(view):
            view[0] = len(self.exports) % 251  # every export of the buffer shows it
        del view
        self.exports.append([exp, buf])

    @precondition(lambda self: self.exports)
    @rule(data=st.data())
    def release_export(self, data):
        i = data.draw(st.integers(0, len(self.exports) - 1))
        self.exports.pop(i)

    @precondition(lambda self: self.buffers)
    @rule(data=st.data())
    def close(self, data):
        i = data.draw(st.integers(0, len(self.buffers) - 1))
        buf, _ = self.buffers[i]
        exported = any(owner is buf for _, owner in self.exports)
        try:
            buf.close()
        except BufferError:
            assert exported
            assert not buf.closed
        else:
            assert not exported and buf.closed
            self.buffers.pop(i)

    @precondition(lambda self: self.buffers)
    @rule(data=st.data(), new_size=st.integers(0, 1 << 14))
    def resize(self, data, new_size):
        buf, _ = self.buffers[data.draw(st.integers(0, len(self.buffers) - 1))]
        exported = any(owner is buf for _, owner in self.exports)
        moves = new_size > buf.capacity()
        ptr = buf.ptr
        try:
            buf.resize(new_size)
        except BufferError:
            assert exported and moves
            assert buf.ptr == ptr
        except nbrmm.CudaError:
            # Moving contents needs a CUDA copy: without a GPU it fails, leaving the buffer.
            assert moves and buf.ptr == ptr
        except MemoryError:
            assert moves and buf.ptr == ptr
        else:
            assert buf.size == new_size
            if exported:
                assert buf.ptr == ptr

    @precondition(lambda self: self.buffers)
    @rule(data=st.data())
    def drop(self, data):
        i = data.draw(st.integers(0, len(self.buffers) - 1))
        self.buffers.pop(i)  # the exports (if any) keep it alive and valid

    # -- the model ---------------------------------------------------------------------
    @invariant()
    def no_two_buffers_share_memory(self):
        spans = []
        for buf, alignment in self.buffers:
            if buf.closed or buf.capacity() == 0:
                continue
            spans.append((buf.ptr, buf.ptr + buf.capacity()))
        for _, owner in self.exports:
            if not any(owner is b for b, _ in self.buffers) and owner.capacity():
                spans.append((owner.ptr, owner.ptr + owner.capacity()))
        spans = sorted(set(spans))
        for (_, end), (start, _) in zip(spans, spans[1:]):
            assert end <= start, "two live buffers share memory"

    @invariant()
    def exports_show_their_buffers_memory(self):
        for exp, owner in self.exports:
            assert not owner.closed
            view = memoryview(exp).cast("B") if not isinstance(exp, memoryview) else exp
            if len(view):
                # The export and a fresh view of its buffer are the same memory.
                fresh = memoryview(owner)
                if len(fresh):  # a resize may have shrunk the buffer under the export
                    assert view[0] == fresh[0]
                del fresh

    @invariant()
    def alignments_hold(self):
        for buf, alignment in self.buffers:
            if not buf.closed and buf.size:
                assert buf.ptr % alignment == 0


SafetyMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
TestSafetyMachine = SafetyMachine.TestCase
